package io.palkit.demo.runtime;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.RuntimeKind;
import io.palkit.core.bundle.TaskSpec;
import io.palkit.core.tokenizer.Encoding;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A verified bundle's ExecuTorch task programs, each opened once against the bundle's one
 * executorch/trunk.ptd. The trunk file is memory-mapped, so it is stored once on disk and its
 * pages are shared between the programs. Java, so the host tests run this exact loading path.
 */
public final class ExecuTorchTasks implements AutoCloseable {
    private final Bundle bundle;
    private final int threads;
    private final String trunkData;
    private final Map<String, ExecuTorchProgram> programs = new LinkedHashMap<>();

    public ExecuTorchTasks(Bundle bundle, int threads) {
        this.bundle = bundle;
        this.threads = threads;
        this.trunkData = bundle.file(bundle.manifest.trunkFiles.get(RuntimeKind.EXECUTORCH)).getPath();
    }

    /** Makes the task's program resident; nothing happens when it already is. */
    public void load(TaskSpec task) {
        programs.computeIfAbsent(task.name, name -> new ExecuTorchProgram(
                bundle.file(task.files.get(RuntimeKind.EXECUTORCH)).getPath(), trunkData, threads));
    }

    /** The task's logits for one unpadded example, loading its program on first use. */
    public float[] run(TaskSpec task, Encoding input) {
        load(task);
        return programs.get(task.name).forward(input.inputIds, input.attentionMask, input.tokenTypeIds);
    }

    @Override
    public void close() {
        programs.values().forEach(ExecuTorchProgram::close);
        programs.clear();
    }
}
