package io.palkit.demo.runtime

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtLoraAdapter
import ai.onnxruntime.OrtSession
import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.bundle.TaskSpec
import io.palkit.core.tokenizer.Encoding
import java.nio.LongBuffer

/** An OrtSession per one-task graph a task runs in (TaskSpec.onnxModel: the trunk graph, or its
 *  own placement's), opened on first use; each task is an OrtLoraAdapter activated per run. */
class OrtTaskRunner(private val bundle: Bundle, threads: Int) : TaskRunner {
    override val runtime = RuntimeKind.ONNXRUNTIME

    private val env = OrtEnvironment.getEnvironment()
    // Kept open as long as the session: ORT's Javadoc forbids closing them while it lives.
    private val options = OrtSession.SessionOptions().apply {
        if (threads > 0) setIntraOpNumThreads(threads)
    }
    private val sessions = HashMap<String, OrtSession>()
    private val adapters = HashMap<String, OrtLoraAdapter>()

    override fun loadTask(task: TaskSpec) {
        sessions.getOrPut(task.onnxModel) {
            env.createSession(bundle.file(task.onnxModel).path, options)
        }
        adapters.getOrPut(task.name) {
            OrtLoraAdapter.create(bundle.file(task.files.getValue(runtime)).path)
        }
    }

    override fun run(task: TaskSpec, input: Encoding): FloatArray {
        loadTask(task)
        val shape = longArrayOf(1, input.length().toLong())
        val columns = listOf(input.inputIds, input.attentionMask, input.tokenTypeIds)
        val tensors = bundle.manifest.inputNames.zip(columns).associate { (name, values) ->
            name to OnnxTensor.createTensor(env, LongBuffer.wrap(values), shape)
        }
        try {
            OrtSession.RunOptions().use { options ->
                options.addActiveLoraAdapter(adapters.getValue(task.name))
                sessions.getValue(task.onnxModel).run(tensors, options).use { result ->
                    // [1, 1 + seq, columns]: flattened as the ExecuTorch program returns it
                    @Suppress("UNCHECKED_CAST")
                    val rows = (result.get(0).value as Array<Array<FloatArray>>)[0]
                    val columns = rows[0].size
                    return FloatArray(rows.size * columns) { rows[it / columns][it % columns] }
                }
            }
        } finally {
            tensors.values.forEach { it.close() }
        }
    }

    override fun close() {
        adapters.values.forEach { it.close() }
        sessions.values.forEach { it.close() }
        options.close()
    }
}
