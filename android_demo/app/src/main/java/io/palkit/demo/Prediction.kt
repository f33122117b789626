package io.palkit.demo

import io.palkit.core.bundle.TaskKind
import io.palkit.core.bundle.TaskSpec
import kotlin.math.exp

/** What one task says about the input, ready to show. */
data class Prediction(val task: TaskSpec, val summary: String, val details: String, val latencyMs: Double)

fun interpret(task: TaskSpec, logits: FloatArray, latencyMs: Double): Prediction =
    when (task.kind) {
        TaskKind.PAIR_REGRESSION -> {
            // The program already maps the score into score_range (BUNDLE.md).
            val (low, high) = task.scoreRange.let { it[0] to it[1] }
            Prediction(task, "score %.2f".format(logits[0]), "range %.0f–%.0f".format(low, high), latencyMs)
        }
        else -> {
            val probs = softmax(logits)
            val best = probs.indices.maxBy { probs[it] }
            val details = task.labels.indices.joinToString("  ") { "%s %.2f".format(task.labels[it], probs[it]) }
            val summary = if (task.kind == TaskKind.PAIR_CLASSIFICATION && task.labels.size == 2) {
                "%s (p=%.2f)".format(task.labels[best], probs[best])
            } else {
                task.labels[best]
            }
            Prediction(task, summary, details, latencyMs)
        }
    }

private fun softmax(logits: FloatArray): DoubleArray {
    val max = logits.max()
    val e = logits.map { exp((it - max).toDouble()) }
    val sum = e.sum()
    return DoubleArray(e.size) { e[it] / sum }
}
