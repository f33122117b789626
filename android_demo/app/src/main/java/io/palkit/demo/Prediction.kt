package io.palkit.demo

import io.palkit.core.bundle.TaskKind
import io.palkit.core.bundle.TaskSpec
import io.palkit.core.decode.Decoding
import io.palkit.core.decode.Span
import io.palkit.core.decode.TaskRows
import io.palkit.core.tokenizer.Words
import kotlin.math.exp

/** What one task says about the input, ready to show; a tagging task also gives its spans of
 *  the text's words. */
data class Prediction(
    val task: TaskSpec,
    val summary: String,
    val details: String,
    val latencyMs: Double,
    val words: List<String> = emptyList(),
    val spans: List<Span> = emptyList(),
)

/** [rows]: the task's output rows (TaskRows) for an input of [tokens] tokens; a tagging task
 *  reads its text as [words] (BertTokenizer.encodeWords), decoded as palkit's runtime does. */
fun interpret(task: TaskSpec, rows: FloatArray, tokens: Int, words: Words?, latencyMs: Double): Prediction =
    when (task.kind) {
        TaskKind.PAIR_REGRESSION -> {
            // The program already maps the score into score_range (BUNDLE.md).
            val (low, high) = task.scoreRange.let { it[0] to it[1] }
            Prediction(task, "score %.2f".format(rows[0]), "range %.0f–%.0f".format(low, high), latencyMs)
        }
        TaskKind.MULTI_LABEL -> {
            val logits = TaskRows.sentence(rows, task.numOutputs)
            val chosen = Decoding.labelSet(logits, task.labels, task.threshold)
            val details = chosen.joinToString("  ") {
                "%s %.2f".format(it, Decoding.sigmoid(logits[task.labels.indexOf(it)].toDouble()))
            }
            Prediction(task, chosen.joinToString(", "), details, latencyMs)
        }
        TaskKind.TOKEN_TAGGING -> {
            val text = requireNotNull(words) { "a tagging task reads the text's words" }
            val tags = Decoding.wordTags(TaskRows.tokens(rows, tokens, task.numOutputs),
                text.firstPieces, task.labels, text.words.size)
            val spans = Decoding.bioSpans(tags)
            val summary = spans.joinToString(", ") { "${text.words.subList(it.start, it.end).joinToString(" ")}: ${it.type}" }
            Prediction(task, summary.ifEmpty { "no spans" }, tags.joinToString(" "), latencyMs,
                text.words, spans)
        }
        else -> {
            val probs = softmax(TaskRows.sentence(rows, task.numOutputs))
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
