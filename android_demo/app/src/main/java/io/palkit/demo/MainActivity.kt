package io.palkit.demo

import android.os.Bundle as AndroidBundle
import androidx.activity.ComponentActivity
import androidx.activity.compose.setContent
import androidx.compose.foundation.layout.Column
import androidx.compose.foundation.layout.fillMaxSize
import androidx.compose.foundation.layout.padding
import androidx.compose.material3.MaterialTheme
import androidx.compose.material3.Scaffold
import androidx.compose.material3.Tab
import androidx.compose.material3.TabRow
import androidx.compose.material3.Text
import androidx.compose.runtime.Composable
import androidx.compose.runtime.LaunchedEffect
import androidx.compose.runtime.getValue
import androidx.compose.runtime.mutableIntStateOf
import androidx.compose.runtime.mutableStateOf
import androidx.compose.runtime.remember
import androidx.compose.runtime.setValue
import androidx.compose.ui.Modifier
import androidx.compose.ui.platform.LocalContext
import androidx.compose.ui.unit.dp
import io.palkit.demo.ui.BenchScreen
import io.palkit.demo.ui.DemoScreen
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

class MainActivity : ComponentActivity() {
    override fun onCreate(savedInstanceState: AndroidBundle?) {
        super.onCreate(savedInstanceState)
        setContent { MaterialTheme { App() } }
    }
}

/** Loading → either a refusal message or the two tabs. */
sealed interface LoadState {
    data object Loading : LoadState
    data class Refused(val message: String) : LoadState
    data class Ready(val session: BundleSession) : LoadState
}

@Composable
private fun App() {
    val context = LocalContext.current
    var state by remember { mutableStateOf<LoadState>(LoadState.Loading) }
    LaunchedEffect(Unit) {
        state = withContext(Dispatchers.IO) {
            val dir = BundleLocator.locate(context)
                ?: return@withContext LoadState.Refused(
                    "No bundle found. Push one with `adb push BUNDLE/. " +
                        "${BundleLocator.pushedDir(context)}/` or ship it in assets/bundle/.")
            try {
                LoadState.Ready(BundleSession.open(dir, TrustedKey.load(context)))
            } catch (e: Exception) {
                LoadState.Refused("This bundle was refused:\n${e.message}")
            }
        }
    }
    Scaffold { padding ->
        Column(Modifier.padding(padding).fillMaxSize()) {
            when (val s = state) {
                LoadState.Loading -> Text("Verifying bundle…", Modifier.padding(16.dp))
                is LoadState.Refused -> Text(s.message, Modifier.padding(16.dp), color = MaterialTheme.colorScheme.error)
                is LoadState.Ready -> Tabs(s.session)
            }
        }
    }
}

@Composable
private fun Tabs(session: BundleSession) {
    var tab by remember { mutableIntStateOf(0) }
    TabRow(selectedTabIndex = tab) {
        Tab(selected = tab == 0, onClick = { tab = 0 }, text = { Text("Try it") })
        Tab(selected = tab == 1, onClick = { tab = 1 }, text = { Text("Benchmark") })
    }
    when (tab) {
        0 -> DemoScreen(session)
        else -> BenchScreen(session.bundle)
    }
}
