package io.palkit.demo.runtime

import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.bundle.TaskSpec
import io.palkit.core.tokenizer.Encoding

/**
 * One runtime holding the bundle's trunk once and swapping a small per-task part in:
 * an ONNX Runtime LoRA adapter, or an ExecuTorch task program over the shared trunk.ptd.
 */
interface TaskRunner : AutoCloseable {
    val runtime: RuntimeKind

    /** Makes the task's adapter/program resident; cheap when it already is. */
    fun loadTask(task: TaskSpec)

    /** The task's output rows for one unpadded example, [1 + seq, columns] flattened
     *  (io.palkit.core.decode.TaskRows reads a task's values from them). */
    fun run(task: TaskSpec, input: Encoding): FloatArray

    companion object {
        /** Opens the trunk for [runtime]; tasks load on first use or via [loadTask]. */
        fun open(bundle: Bundle, runtime: RuntimeKind, threads: Int): TaskRunner = when (runtime) {
            RuntimeKind.ONNXRUNTIME -> OrtTaskRunner(bundle, threads)
            RuntimeKind.EXECUTORCH -> ExecuTorchTaskRunner(bundle, threads)
        }
    }
}
