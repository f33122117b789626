package io.palkit.demo

import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.tokenizer.BertTokenizer
import io.palkit.demo.runtime.TaskRunner
import java.io.File
import java.security.PublicKey

/** A verified bundle, its tokenizer, and the runners opened so far (one per runtime). */
class BundleSession private constructor(val bundle: Bundle, val tokenizer: BertTokenizer) : AutoCloseable {
    private val runners = HashMap<RuntimeKind, TaskRunner>()
    val loadMs = HashMap<RuntimeKind, Double>()

    val runtimes: List<RuntimeKind> get() = bundle.manifest.trunkFiles.keys.toList()

    fun runner(runtime: RuntimeKind, threads: Int = 0): TaskRunner = runners.getOrPut(runtime) {
        val start = System.nanoTime()
        val runner = TaskRunner.open(bundle, runtime, threads)
        bundle.manifest.tasks.forEach(runner::loadTask)
        loadMs[runtime] = (System.nanoTime() - start) / 1e6
        runner
    }

    fun predictAll(runtime: RuntimeKind, first: String, second: String): List<Prediction> {
        val runner = runner(runtime)
        return bundle.manifest.tasks.map { task ->
            val input = if (task.kind.isPair) tokenizer.encodePair(first, second) else tokenizer.encode(first)
            val start = System.nanoTime()
            val logits = runner.run(task, input)
            interpret(task, logits, (System.nanoTime() - start) / 1e6)
        }
    }

    override fun close() {
        runners.values.forEach { it.close() }
        runners.clear()
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
