package io.palkit.demo.bench

import android.os.Build
import io.palkit.core.bench.BenchReport
import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.TaskSpec
import io.palkit.demo.runtime.TaskRunner
import java.io.File

/**
 * Measures every runtime in the bundle: fresh trunk load, per-task swap-in, N timed runs per task
 * and N runs of "all tasks in turn", resident memory. Inputs are max_length tokens long, the
 * worst case the app will see.
 */
class Benchmark(private val bundle: Bundle, private val runs: Int, private val threads: Int) {
    private val warmupRuns = 3

    fun run(progress: (String) -> Unit): BenchReport {
        val report = BenchReport(Build.MANUFACTURER, Build.MODEL, Build.VERSION.RELEASE, Build.SUPPORTED_ABIS.first())
        val tokenizer = bundle.tokenizer()
        val maxLength = bundle.manifest.tokenizer.maxLength
        val text = List(maxLength) { "benchmark" }.joinToString(" ")
        val single = tokenizer.encode(text)
        val pair = tokenizer.encodePair(text, text)
        fun inputFor(task: TaskSpec) = if (task.kind.isPair) pair else single

        for (runtime in bundle.manifest.trunkFiles.keys) {
            report.bundleSize("${runtime.key}_bytes", bundle.bytesFor(runtime))
            progress("${runtime.key}: loading")
            var start = System.nanoTime()
            TaskRunner.open(bundle, runtime, threads).use { runner ->
                report.loadMs(runtime.key, elapsedMs(start))
                val swaps = bundle.manifest.tasks.map { task ->
                    start = System.nanoTime()
                    runner.loadTask(task)
                    elapsedMs(start)
                }
                report.swapMs(runtime.key, swaps.average())
                report.memoryRssBytes("after_load_${runtime.key}", residentBytes())
                for (task in bundle.manifest.tasks) {
                    progress("${runtime.key}: ${task.name}")
                    val input = inputFor(task)
                    report.result(runtime.key, "task:${task.name}", threads, input.length(),
                        time { runner.run(task, input) })
                }
                progress("${runtime.key}: all tasks")
                report.result(runtime.key, "all_tasks", threads, single.length(),
                    time { bundle.manifest.tasks.forEach { runner.run(it, inputFor(it)) } })
                report.memoryRssBytes("after_runs_${runtime.key}", residentBytes())
            }
        }
        return report
    }

    private fun time(body: () -> Unit): DoubleArray {
        repeat(warmupRuns) { body() }
        return DoubleArray(runs) {
            val start = System.nanoTime()
            body()
            elapsedMs(start)
        }
    }

    private fun elapsedMs(startNanos: Long) = (System.nanoTime() - startNanos) / 1e6

    /** VmRSS from /proc: what the process really holds, native runtime memory included. */
    private fun residentBytes(): Long = File("/proc/self/status").readLines()
        .first { it.startsWith("VmRSS:") }
        .split(Regex("\\s+"))[1].toLong() * 1024
}
