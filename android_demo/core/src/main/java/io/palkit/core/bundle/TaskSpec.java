package io.palkit.core.bundle;

import java.util.List;
import java.util.Map;

/** One entry of the manifest's "tasks" list. */
public final class TaskSpec {
    public final String name;
    public final TaskKind kind;
    /** Class, label or tag names (output column i is labels[i]); empty for regression. */
    public final List<String> labels;
    /** [low, high] for regression tasks, else null. */
    public final double[] scoreRange;
    public final int numOutputs;
    /** multi_label: a label is chosen when its sigmoid reaches this; NaN for other kinds. */
    public final double threshold;
    public final String trunkSha256;
    /** Bundle-relative adapter/program path per runtime. */
    public final Map<RuntimeKind, String> files;
    /** The trunk layers the task's PALs sit in; empty for a head-only task. */
    public final List<Integer> adapterLayers;
    /** ExecuTorch: the program's one-task method for the task's placement, or null without
     *  ExecuTorch. Tasks of one placement share a method; a task added later with another
     *  adapter (a head only, PALs elsewhere) has its own. */
    public final String executorchMethod;
    /** ExecuTorch: the tensor names of the task's weights file, in its method's input order
     *  after the text inputs (empty without ExecuTorch). */
    public final List<String> executorchTaskInputs;
    /** ONNX Runtime: the one-task graph the task's adapter file is laid out for (the trunk
     *  graph, or its own placement's), or null without ONNX Runtime. */
    public final String onnxModel;

    TaskSpec(String name, TaskKind kind, List<String> labels, double[] scoreRange, int numOutputs,
            double threshold, String trunkSha256, Map<RuntimeKind, String> files, List<Integer> adapterLayers,
            String executorchMethod, List<String> executorchTaskInputs, String onnxModel) {
        this.name = name;
        this.kind = kind;
        this.labels = labels;
        this.scoreRange = scoreRange;
        this.numOutputs = numOutputs;
        this.threshold = threshold;
        this.trunkSha256 = trunkSha256;
        this.files = files;
        this.adapterLayers = adapterLayers;
        this.executorchMethod = executorchMethod;
        this.executorchTaskInputs = executorchTaskInputs;
        this.onnxModel = onnxModel;
    }

    public boolean headOnly() {
        return adapterLayers.isEmpty();
    }
}
