package io.palkit.demo

import android.app.Application
import android.os.Bundle as AndroidBundle
import androidx.activity.ComponentActivity
import androidx.activity.compose.setContent
import androidx.activity.viewModels
import androidx.compose.foundation.layout.Column
import androidx.compose.foundation.layout.fillMaxSize
import androidx.compose.foundation.layout.padding
import androidx.compose.material3.MaterialTheme
import androidx.compose.material3.Scaffold
import androidx.compose.material3.Tab
import androidx.compose.material3.TabRow
import androidx.compose.material3.Text
import androidx.compose.runtime.Composable
import androidx.compose.runtime.getValue
import androidx.compose.runtime.mutableIntStateOf
import androidx.compose.runtime.mutableStateOf
import androidx.compose.runtime.remember
import androidx.compose.runtime.setValue
import androidx.compose.ui.Modifier
import androidx.compose.ui.unit.dp
import androidx.lifecycle.AndroidViewModel
import androidx.lifecycle.viewModelScope
import io.palkit.demo.ui.BenchScreen
import io.palkit.demo.ui.DemoScreen
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext

class MainActivity : ComponentActivity() {
    private val model: BundleViewModel by viewModels()

    override fun onCreate(savedInstanceState: AndroidBundle?) {
        super.onCreate(savedInstanceState)
        setContent { MaterialTheme { App(model.state) } }
    }
}

/** Loading → either a refusal message or the two tabs. */
sealed interface LoadState {
    data object Loading : LoadState
    data class Refused(val message: String) : LoadState
    data class Ready(val session: BundleSession) : LoadState
}

/**
 * Holds the session across rotation and theme changes: the bundle is located (assets copied at
 * most once per install) and verified once per process, and the session's native runners are
 * closed when the activity is finished for good, not on every re-creation.
 */
class BundleViewModel(application: Application) : AndroidViewModel(application) {
    var state by mutableStateOf<LoadState>(LoadState.Loading)
        private set

    init {
        viewModelScope.launch { state = withContext(Dispatchers.IO) { open(application) } }
    }

    private fun open(context: Application): LoadState {
        val dir = BundleLocator.locate(context)
            ?: return LoadState.Refused(
                "No bundle found. Push one with `adb push BUNDLE/. " +
                    "${BundleLocator.pushedDir(context)}/` or ship it in assets/bundle/.")
        return try {
            LoadState.Ready(BundleSession.open(dir, TrustedKey.load(context)))
        } catch (e: Exception) {
            LoadState.Refused("This bundle was refused:\n${e.message}")
        }
    }

    override fun onCleared() {
        (state as? LoadState.Ready)?.session?.close()
    }
}

@Composable
private fun App(state: LoadState) {
    Scaffold { padding ->
        Column(Modifier.padding(padding).fillMaxSize()) {
            when (state) {
                LoadState.Loading -> Text("Verifying bundle…", Modifier.padding(16.dp))
                is LoadState.Refused -> Text(state.message, Modifier.padding(16.dp), color = MaterialTheme.colorScheme.error)
                is LoadState.Ready -> Tabs(state.session)
            }
        }
    }
}

@Composable
private fun Tabs(session: BundleSession) {
    var tab by remember { mutableIntStateOf(0) }
    // Shown above both tabs: a runtime that differs from the exporter's may refuse the files.
    session.versionNotes.forEach {
        Text(it, Modifier.padding(horizontal = 16.dp, vertical = 4.dp),
            color = MaterialTheme.colorScheme.error, style = MaterialTheme.typography.bodySmall)
    }
    TabRow(selectedTabIndex = tab) {
        Tab(selected = tab == 0, onClick = { tab = 0 }, text = { Text("Try it") })
        Tab(selected = tab == 1, onClick = { tab = 1 }, text = { Text("Benchmark") })
    }
    when (tab) {
        0 -> DemoScreen(session)
        else -> BenchScreen(session)
    }
}
