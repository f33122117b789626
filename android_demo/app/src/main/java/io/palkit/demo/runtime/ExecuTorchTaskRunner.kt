package io.palkit.demo.runtime

import io.palkit.core.bundle.Bundle
import io.palkit.core.bundle.RuntimeKind
import io.palkit.core.bundle.TaskSpec
import io.palkit.core.tokenizer.Encoding

/** The ExecuTorch [TaskRunner]: [ExecuTorchTasks] (Java, host-tested) behind the interface. */
class ExecuTorchTaskRunner(bundle: Bundle, threads: Int) : TaskRunner {
    override val runtime = RuntimeKind.EXECUTORCH

    private val tasks = ExecuTorchTasks(bundle, threads)

    override fun loadTask(task: TaskSpec) = tasks.load(task)

    override fun run(task: TaskSpec, input: Encoding): FloatArray = tasks.run(task, input)

    override fun close() = tasks.close()
}
