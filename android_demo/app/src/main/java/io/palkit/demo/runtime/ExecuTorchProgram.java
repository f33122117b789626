package io.palkit.demo.runtime;

/**
 * A loaded ExecuTorch task program bound to the shared trunk data file (see app/src/main/cpp/).
 *
 * <p>Java rather than Kotlin so that the host tests compile this very class with javac and call
 * the JNI library through it (android_demo/host/).
 */
public final class ExecuTorchProgram implements AutoCloseable {
    static {
        System.loadLibrary("palkit_executorch");
    }

    private long handle;

    /** Loads forward() of {@code programPath} with its weights from {@code trunkDataPath}. */
    public ExecuTorchProgram(String programPath, String trunkDataPath, int threads) {
        handle = nativeLoad(programPath, trunkDataPath, threads);
    }

    /** The logits for one unpadded example; inputs in the manifest's io.inputs order. */
    public float[] forward(long[] inputIds, long[] attentionMask, long[] tokenTypeIds) {
        if (handle == 0L) {
            throw new IllegalStateException("program is closed");
        }
        return nativeForward(handle, inputIds, attentionMask, tokenTypeIds);
    }

    @Override
    public void close() {
        if (handle != 0L) {
            nativeFree(handle);
        }
        handle = 0L;
    }

    private static native long nativeLoad(String program, String data, int threads);

    private static native float[] nativeForward(
            long handle, long[] inputIds, long[] attentionMask, long[] tokenTypeIds);

    private static native void nativeFree(long handle);
}
