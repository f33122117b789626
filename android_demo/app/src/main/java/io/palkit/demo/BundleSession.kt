package io.palkit.demo

import io.palkit.core.bench.BenchReport
import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.bundle.TaskKind
import io.palkit.core.tokenizer.BertTokenizer
import io.palkit.demo.bench.Benchmark
import io.palkit.demo.runtime.RuntimeVersions
import io.palkit.demo.runtime.TaskRunner
import java.io.File
import java.security.PublicKey
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.Executors
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.withContext

/**
 * A verified bundle, its tokenizer, and the runners opened so far (one per runtime).
 *
 * Every runtime call runs on one thread of its own: an ExecuTorch Module or an ONNX Runtime
 * session is never entered from two threads (a run started on one tab while the other's runs),
 * and no runner is closed while a call is using it.
 */
class BundleSession private constructor(val bundle: Bundle, val tokenizer: BertTokenizer) : AutoCloseable {
    private val worker = Executors.newSingleThreadExecutor { Thread(it, "palkit-runtimes") }
    private val runtimeThread = worker.asCoroutineDispatcher()
    private val runners = HashMap<RuntimeKind, TaskRunner>() // touched on runtimeThread only
    val loadMs = ConcurrentHashMap<RuntimeKind, Double>()

    val runtimes: List<RuntimeKind> get() = bundle.manifest.trunkFiles.keys.toList()

    /** Where the bundle's runtime versions differ from the app's, one line each to show. */
    val versionNotes: List<String> = RuntimeVersions.differences(
        bundle.manifest.runtimeVersions,
        mapOf(RuntimeKind.EXECUTORCH to BuildConfig.EXECUTORCH_VERSION,
            RuntimeKind.ONNXRUNTIME to BuildConfig.ONNXRUNTIME_VERSION),
    )

    suspend fun predictAll(runtime: RuntimeKind, first: String, second: String): List<Prediction> =
        withContext(runtimeThread) {
            val runner = runner(runtime)
            // a tagging task reads the text's words (the same pieces the plain text gets)
            val words = if (bundle.manifest.tasks.any { it.kind == TaskKind.TOKEN_TAGGING }) {
                tokenizer.encodeWords(first)
            } else {
                null
            }
            bundle.manifest.tasks.map { task ->
                val input = when {
                    task.kind.isPair -> tokenizer.encodePair(first, second)
                    task.kind == TaskKind.TOKEN_TAGGING -> words!!.encoding
                    else -> tokenizer.encode(first)
                }
                val start = System.nanoTime()
                val rows = runner.run(task, input)
                interpret(task, rows, input.length(), words, (System.nanoTime() - start) / 1e6)
            }
        }

    /**
     * Runs the benchmark with its own runners at [threads] threads. "Try it"'s runners are closed
     * first and reopen on its next run: ExecuTorch has one thread pool per process, and its
     * programs keep the pool they were loaded on, so the JNI resizes it only while no program
     * is loaded.
     */
    suspend fun benchmark(runs: Int, threads: Int, progress: (String) -> Unit): BenchReport =
        withContext(runtimeThread) {
            closeRunners()
            Benchmark(bundle, runs, threads).run(progress)
        }

    /** Runners use the runtimes' default thread counts here; only the benchmark sets one. */
    private fun runner(runtime: RuntimeKind): TaskRunner = runners.getOrPut(runtime) {
        val start = System.nanoTime()
        val runner = TaskRunner.open(bundle, runtime, 0)
        bundle.manifest.tasks.forEach(runner::loadTask)
        loadMs[runtime] = (System.nanoTime() - start) / 1e6
        runner
    }

    private fun closeRunners() {
        runners.values.forEach { it.close() }
        runners.clear()
        loadMs.clear()
    }

    /** Closes the runners once the call in progress, if any, has returned; does not wait. */
    override fun close() {
        worker.execute { closeRunners() }
        worker.shutdown()
    }

    companion object {
        /**
         * With a trusted key, model.sig first (an unsigned, foreign or edited bundle is refused
         * before its manifest is parsed); then every file's size and SHA-256 and the trunk hashes.
         * Only then may a runner (ONNX Runtime, the ExecuTorch JNI) open a file: runners take a
         * Bundle, and a Bundle exists only once verified. Throws BundleException to show.
         */
        fun open(dir: File, trustedKey: PublicKey?): BundleSession {
            val bundle = Bundle.open(dir, trustedKey)
            return BundleSession(bundle, bundle.tokenizer())
        }
    }
}
