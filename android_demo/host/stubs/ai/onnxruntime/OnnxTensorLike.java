// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py): only the members
// the app calls. Signatures from ONNX Runtime's published Java API source,
// microsoft/onnxruntime java/src/main/java/ai/onnxruntime/OnnxTensorLike.java (onnxruntime-android 1.31.0).
package ai.onnxruntime;

public abstract class OnnxTensorLike implements OnnxValue {
    OnnxTensorLike() {}
}
