package io.palkit.demo.runtime

import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.bundle.TaskSpec
import io.palkit.core.tokenizer.Encoding

/**
 * One ExecuTorch program per task, each opened against the same executorch/trunk.ptd. The trunk
 * file is memory-mapped, so it is stored once on disk and its pages are shared between programs.
 */
class ExecuTorchTaskRunner(private val bundle: Bundle, private val threads: Int) : TaskRunner {
    override val runtime = RuntimeKind.EXECUTORCH

    private val trunkData = bundle.file(bundle.manifest.trunkFiles.getValue(runtime)).path
    private val programs = HashMap<String, ExecuTorchProgram>()

    override fun loadTask(task: TaskSpec) {
        programs.getOrPut(task.name) {
            ExecuTorchProgram(bundle.file(task.files.getValue(runtime)).path, trunkData, threads)
        }
    }

    override fun run(task: TaskSpec, input: Encoding): FloatArray {
        loadTask(task)
        return programs.getValue(task.name)
            .forward(input.inputIds, input.attentionMask, input.tokenTypeIds)
    }

    override fun close() {
        programs.values.forEach { it.close() }
    }
}
