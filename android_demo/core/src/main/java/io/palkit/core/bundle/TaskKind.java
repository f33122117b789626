package io.palkit.core.bundle;

/** What a task's logits mean and how many texts it takes. */
public enum TaskKind {
    SINGLE_CLASSIFICATION("single_classification", false),
    PAIR_CLASSIFICATION("pair_classification", true),
    PAIR_REGRESSION("pair_regression", true);

    public final String key;
    public final boolean isPair;

    TaskKind(String key, boolean isPair) {
        this.key = key;
        this.isPair = isPair;
    }

    static TaskKind fromKey(String key) throws BundleException {
        for (TaskKind kind : values()) {
            if (kind.key.equals(key)) {
                return kind;
            }
        }
        throw new BundleException("unknown task kind \"" + key + "\"");
    }
}
