// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py): only the members
// the app calls. Signatures from ONNX Runtime's published Java API source,
// microsoft/onnxruntime java/src/main/java/ai/onnxruntime/OrtEnvironment.java (onnxruntime-android 1.31.0).
package ai.onnxruntime;

public final class OrtEnvironment implements AutoCloseable {
    private OrtEnvironment() {}

    public static OrtEnvironment getEnvironment() {
        throw new RuntimeException("Stub!");
    }

    public OrtSession createSession(String modelPath, OrtSession.SessionOptions options)
            throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() {
        throw new RuntimeException("Stub!");
    }
}
