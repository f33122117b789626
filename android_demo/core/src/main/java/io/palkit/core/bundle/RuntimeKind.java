package io.palkit.core.bundle;

/** The runtimes a bundle can carry; {@link #key} is the name used in manifest.json. */
public enum RuntimeKind {
    EXECUTORCH("executorch"),
    ONNXRUNTIME("onnxruntime");

    public final String key;

    RuntimeKind(String key) {
        this.key = key;
    }
}
