// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py): only the members
// the app calls. Signatures from ONNX Runtime's published Java API source,
// microsoft/onnxruntime java/src/main/java/ai/onnxruntime/OnnxTensor.java (onnxruntime-android 1.31.0).
package ai.onnxruntime;

import java.nio.LongBuffer;

public class OnnxTensor extends OnnxTensorLike {
    private OnnxTensor() {}

    public static OnnxTensor createTensor(OrtEnvironment env, LongBuffer data, long[] shape)
            throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public Object getValue() throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() {
        throw new RuntimeException("Stub!");
    }
}
