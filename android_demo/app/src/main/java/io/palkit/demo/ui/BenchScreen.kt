package io.palkit.demo.ui

import androidx.compose.foundation.layout.Arrangement
import androidx.compose.foundation.layout.Column
import androidx.compose.foundation.layout.fillMaxWidth
import androidx.compose.foundation.layout.padding
import androidx.compose.foundation.rememberScrollState
import androidx.compose.foundation.text.KeyboardOptions
import androidx.compose.foundation.verticalScroll
import androidx.compose.material3.Button
import androidx.compose.material3.MaterialTheme
import androidx.compose.material3.OutlinedTextField
import androidx.compose.material3.Text
import androidx.compose.runtime.Composable
import androidx.compose.runtime.getValue
import androidx.compose.runtime.mutableStateOf
import androidx.compose.runtime.remember
import androidx.compose.runtime.rememberCoroutineScope
import androidx.compose.runtime.setValue
import androidx.compose.ui.Modifier
import androidx.compose.ui.platform.LocalContext
import androidx.compose.ui.text.font.FontFamily
import androidx.compose.ui.text.input.KeyboardType
import androidx.compose.ui.unit.dp
import io.palkit.demo.BundleSession
import java.io.File
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext

/** Runs the session's benchmark and saves its palkit-bench JSON where `adb pull` can fetch it. */
@Composable
fun BenchScreen(session: BundleSession) {
    val context = LocalContext.current
    val scope = rememberCoroutineScope()
    var runs by remember { mutableStateOf("50") }
    var threads by remember { mutableStateOf("4") }
    var status by remember { mutableStateOf("") }
    var json by remember { mutableStateOf("") }
    var busy by remember { mutableStateOf(false) }

    Column(
        Modifier.padding(16.dp).verticalScroll(rememberScrollState()),
        verticalArrangement = Arrangement.spacedBy(8.dp),
    ) {
        OutlinedTextField(runs, { runs = it }, label = { Text("Runs per config") },
            keyboardOptions = KeyboardOptions(keyboardType = KeyboardType.Number))
        OutlinedTextField(threads, { threads = it }, label = { Text("Threads") },
            keyboardOptions = KeyboardOptions(keyboardType = KeyboardType.Number))
        Button(enabled = !busy, onClick = {
            busy = true
            scope.launch {
                try {
                    val report = session.benchmark(runs.toIntOrNull() ?: 50, threads.toIntOrNull() ?: 4) { step ->
                        status = step
                    }
                    json = report.toJson()
                    val out = File(context.getExternalFilesDir(null), "bench/palkit-bench-${System.currentTimeMillis()}.json")
                    withContext(Dispatchers.IO) {
                        out.parentFile?.mkdirs()
                        out.writeText(json)
                    }
                    status = "Saved to ${out.path}"
                } catch (e: Exception) {
                    status = "Benchmark failed: ${e.message ?: e}"
                } catch (e: LinkageError) { // the native library failed to load: an Error
                    status = "Benchmark failed: ${nativeLibraryError(e)}"
                } finally {
                    busy = false
                }
            }
        }) { Text(if (busy) "Running…" else "Run benchmark") }
        Text(status)
        Text(json, Modifier.fillMaxWidth(), fontFamily = FontFamily.Monospace,
            style = MaterialTheme.typography.bodySmall)
    }
}
