// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py): only the members
// the app calls. Signatures from ONNX Runtime's published Java API source,
// microsoft/onnxruntime java/src/main/java/ai/onnxruntime/OrtSession.java (onnxruntime-android 1.31.0).
package ai.onnxruntime;

import java.util.Map;

public class OrtSession implements AutoCloseable {
    private OrtSession() {}

    public Result run(Map<String, ? extends OnnxTensorLike> inputs, RunOptions runOptions)
            throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() throws OrtException {
        throw new RuntimeException("Stub!");
    }

    public static class SessionOptions implements AutoCloseable {
        public SessionOptions() {}

        public void setIntraOpNumThreads(int numThreads) throws OrtException {
            throw new RuntimeException("Stub!");
        }

        @Override
        public void close() {
            throw new RuntimeException("Stub!");
        }
    }

    public static class RunOptions implements AutoCloseable {
        public RunOptions() throws OrtException {}

        public void addActiveLoraAdapter(OrtLoraAdapter adapter) throws OrtException {
            throw new RuntimeException("Stub!");
        }

        @Override
        public void close() {
            throw new RuntimeException("Stub!");
        }
    }

    public static class Result implements AutoCloseable {
        private Result() {}

        public OnnxValue get(int index) {
            throw new RuntimeException("Stub!");
        }

        @Override
        public void close() {
            throw new RuntimeException("Stub!");
        }
    }
}
