package io.palkit.core.bundle;

/** What a task's outputs mean, how many texts it takes and how its outputs are decoded
 *  (runtime/kinds.py; io.palkit.core.decode.Decoding). */
public enum TaskKind {
    SINGLE_CLASSIFICATION("single_classification", false, "argmax"),
    PAIR_CLASSIFICATION("pair_classification", true, "argmax"),
    PAIR_REGRESSION("pair_regression", true, "score"),
    MULTI_LABEL("multi_label", false, "sigmoid_threshold"),
    TOKEN_TAGGING("token_tagging", false, "first_piece_bio_spans");

    public final String key;
    public final boolean isPair;
    /** The manifest's tasks[].decoding for this kind. */
    public final String decoding;

    TaskKind(String key, boolean isPair, String decoding) {
        this.key = key;
        this.isPair = isPair;
        this.decoding = decoding;
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
