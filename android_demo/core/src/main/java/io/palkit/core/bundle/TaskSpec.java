package io.palkit.core.bundle;

import java.util.List;
import java.util.Map;

/** One entry of the manifest's "tasks" list. */
public final class TaskSpec {
    public final String name;
    public final TaskKind kind;
    /** Class names for classification tasks; empty for regression. */
    public final List<String> labels;
    /** [low, high] for regression tasks, else null. */
    public final double[] scoreRange;
    public final int numOutputs;
    public final String trunkSha256;
    /** Bundle-relative adapter/program path per runtime. */
    public final Map<RuntimeKind, String> files;

    TaskSpec(String name, TaskKind kind, List<String> labels, double[] scoreRange, int numOutputs,
            String trunkSha256, Map<RuntimeKind, String> files) {
        this.name = name;
        this.kind = kind;
        this.labels = labels;
        this.scoreRange = scoreRange;
        this.numOutputs = numOutputs;
        this.trunkSha256 = trunkSha256;
        this.files = files;
    }
}
