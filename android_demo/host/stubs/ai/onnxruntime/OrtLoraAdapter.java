// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py): only the members
// the app calls. Signatures from ONNX Runtime's published Java API source,
// microsoft/onnxruntime java/src/main/java/ai/onnxruntime/OrtLoraAdapter.java (onnxruntime-android 1.31.0).
package ai.onnxruntime;

public final class OrtLoraAdapter implements AutoCloseable {
    private OrtLoraAdapter() {}

    public static OrtLoraAdapter create(String adapterPath) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() {
        throw new RuntimeException("Stub!");
    }
}
