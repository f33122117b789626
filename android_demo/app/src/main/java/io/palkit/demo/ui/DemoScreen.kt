package io.palkit.demo.ui

import androidx.compose.foundation.layout.Arrangement
import androidx.compose.foundation.layout.Column
import androidx.compose.foundation.layout.Row
import androidx.compose.foundation.layout.fillMaxWidth
import androidx.compose.foundation.layout.padding
import androidx.compose.foundation.rememberScrollState
import androidx.compose.foundation.verticalScroll
import androidx.compose.material3.Button
import androidx.compose.material3.Card
import androidx.compose.material3.MaterialTheme
import androidx.compose.material3.OutlinedTextField
import androidx.compose.material3.Switch
import androidx.compose.material3.Text
import androidx.compose.runtime.Composable
import androidx.compose.runtime.getValue
import androidx.compose.runtime.mutableStateOf
import androidx.compose.runtime.remember
import androidx.compose.runtime.rememberCoroutineScope
import androidx.compose.runtime.setValue
import androidx.compose.ui.Alignment
import androidx.compose.ui.Modifier
import androidx.compose.ui.graphics.Color
import androidx.compose.ui.text.AnnotatedString
import androidx.compose.ui.text.SpanStyle
import androidx.compose.ui.text.buildAnnotatedString
import androidx.compose.ui.text.font.FontWeight
import androidx.compose.ui.text.withStyle
import androidx.compose.ui.unit.dp
import androidx.compose.ui.unit.sp
import io.palkit.core.bundle.RuntimeKind
import io.palkit.demo.BundleSession
import io.palkit.demo.Prediction
import kotlinx.coroutines.launch

/** Text in, every task's answer and latency out, on the chosen runtime. */
@Composable
fun DemoScreen(session: BundleSession) {
    val scope = rememberCoroutineScope()
    val hasPairTask = session.bundle.manifest.tasks.any { it.kind.isPair }
    var first by remember { mutableStateOf("A man is playing a guitar.") }
    var second by remember { mutableStateOf("Someone plays an instrument.") }
    var runtime by remember { mutableStateOf(session.runtimes.first()) }
    var predictions by remember { mutableStateOf<List<Prediction>>(emptyList()) }
    var error by remember { mutableStateOf<String?>(null) }
    var busy by remember { mutableStateOf(false) }

    Column(
        Modifier.padding(16.dp).verticalScroll(rememberScrollState()),
        verticalArrangement = Arrangement.spacedBy(8.dp),
    ) {
        OutlinedTextField(first, { first = it }, Modifier.fillMaxWidth(), label = { Text("Text") })
        if (hasPairTask) {
            OutlinedTextField(second, { second = it }, Modifier.fillMaxWidth(),
                label = { Text("Second text (pair tasks)") })
        }
        if (session.runtimes.size > 1) {
            Row(verticalAlignment = Alignment.CenterVertically) {
                Text("ONNX Runtime")
                Switch(
                    checked = runtime == RuntimeKind.EXECUTORCH,
                    onCheckedChange = { runtime = if (it) RuntimeKind.EXECUTORCH else RuntimeKind.ONNXRUNTIME },
                    modifier = Modifier.padding(horizontal = 8.dp),
                )
                Text("ExecuTorch")
            }
        } else {
            Text("Runtime: ${runtime.key}")
        }
        Button(enabled = !busy, onClick = {
            busy = true
            scope.launch {
                try {
                    predictions = session.predictAll(runtime, first, second)
                    error = null
                } catch (e: Exception) {
                    error = e.message ?: e.toString()
                } catch (e: LinkageError) { // the native library failed to load: an Error
                    error = nativeLibraryError(e)
                } finally {
                    busy = false
                }
            }
        }) { Text(if (busy) "Running…" else "Run all tasks") }
        session.loadMs[runtime]?.let { Text("Load: %.0f ms".format(it), style = MaterialTheme.typography.bodySmall) }
        error?.let { Text(it, color = MaterialTheme.colorScheme.error) }
        predictions.forEach { PredictionCard(it) }
    }
}

@Composable
private fun PredictionCard(p: Prediction) {
    Card(Modifier.fillMaxWidth()) {
        Column(Modifier.padding(12.dp)) {
            Text("${p.task.name}: ${p.summary}", style = MaterialTheme.typography.titleMedium)
            if (p.spans.isNotEmpty()) Text(highlighted(p))
            Text(p.details, style = MaterialTheme.typography.bodySmall)
            Text("%.1f ms".format(p.latencyMs), style = MaterialTheme.typography.bodySmall)
        }
    }
}

/** The typed text's words with each span highlighted and followed by its type. */
private fun highlighted(p: Prediction): AnnotatedString = buildAnnotatedString {
    val spanAt = p.spans.associateBy { it.start }
    var w = 0
    while (w < p.words.size) {
        if (w > 0) append(" ")
        val span = spanAt[w]
        if (span == null) {
            append(p.words[w++])
            continue
        }
        withStyle(SpanStyle(background = Color(0x553F88F5), fontWeight = FontWeight.SemiBold)) {
            append(p.words.subList(span.start, span.end).joinToString(" "))
        }
        withStyle(SpanStyle(color = Color.Gray, fontSize = 11.sp)) { append(" ${span.type}") }
        w = span.end
    }
}

/** What to show when a runtime's native library could not be loaded (an Error, not an Exception). */
internal fun nativeLibraryError(e: LinkageError): String =
    "A runtime's native library could not be loaded on this device (${e.javaClass.simpleName}: " +
        "${e.message}). Is the APK built for this device's ABI?"
