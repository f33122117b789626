package io.palkit.demo.runtime;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.RuntimeKind;
import io.palkit.core.bundle.TaskSpec;
import io.palkit.core.tokenizer.Encoding;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A verified bundle's ExecuTorch program, opened once against its trunk data file (memory-mapped),
 * and every task's weights file, read when the bundle is opened (small files: a swap must not wait
 * for a read). Swapping tasks is passing another task's weights: no program is loaded, nothing is
 * read (a task added later with another adapter runs the program's method for its placement).
 * Java, so the host tests run this exact path.
 */
public final class ExecuTorchTasks implements AutoCloseable {
    private final Bundle bundle;
    private final ExecuTorchProgram program;
    private final Map<String, Long> weights = new LinkedHashMap<>();

    public ExecuTorchTasks(Bundle bundle, int threads) {
        this.bundle = bundle;
        String trunkData = bundle.file(bundle.manifest.trunkFiles.get(RuntimeKind.EXECUTORCH)).getPath();
        this.program = new ExecuTorchProgram(bundle.file(bundle.manifest.executorchProgram).getPath(),
                trunkData, bundle.manifest.executorchMethod, threads);
        try {
            bundle.manifest.tasks.forEach(this::load);
        } catch (RuntimeException refused) {
            close(); // the weights bound so far and the program
            throw refused;
        }
    }

    /** Reads the task's weights file; nothing happens when it already is (every task of the
     *  bundle is, once it is open). */
    public void load(TaskSpec task) {
        weights.computeIfAbsent(task.name, name -> ExecuTorchProgram.bind(
                bundle.file(task.files.get(RuntimeKind.EXECUTORCH)).getPath(),
                task.executorchTaskInputs));
    }

    /** The task's output rows for one unpadded example (io.palkit.core.decode.TaskRows reads
     *  them), binding its weights on first use. */
    public float[] run(TaskSpec task, Encoding input) {
        load(task);
        return program.forward(task.executorchMethod, weights.get(task.name),
                input.inputIds, input.attentionMask, input.tokenTypeIds);
    }

    @Override
    public void close() {
        weights.values().forEach(ExecuTorchProgram::release);
        weights.clear();
        program.close();
    }
}
