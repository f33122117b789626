package io.palkit.demo.runtime;

import java.util.List;

/**
 * The bundle's one ExecuTorch program, bound to its trunk data file, and the tasks' weights
 * files bound to it (see app/src/main/cpp/): a task is its weights, read once by {@link #bind};
 * a swap is passing another task's weights to {@link #forward}.
 *
 * <p>Java rather than Kotlin so that the host tests compile this very class with javac and call
 * the JNI library through it (android_demo/host/).
 */
public final class ExecuTorchProgram implements AutoCloseable {
    static {
        System.loadLibrary("palkit_executorch");
    }

    private long handle;

    /** Loads {@code method} of {@code programPath} with its trunk weights from {@code trunkDataPath}. */
    public ExecuTorchProgram(String programPath, String trunkDataPath, String method, int threads) {
        handle = nativeLoad(programPath, trunkDataPath, method, threads);
    }

    /** One task's weights file read into memory, its tensors in {@code inputNames} order (the
     *  manifest's runtimes.executorch.task_inputs). Free with {@link #release}. */
    public static long bind(String weightsPath, List<String> inputNames) {
        return nativeBind(weightsPath, inputNames.toArray(new String[0]));
    }

    public static void release(long weights) {
        if (weights != 0L) {
            nativeFreeWeights(weights);
        }
    }

    /** The program's output row for one unpadded example with a bound task's weights, through
     *  the method it was loaded with; the task's result is its first num_outputs values. Inputs
     *  in the manifest's io.inputs order. */
    public float[] forward(long weights, long[] inputIds, long[] attentionMask, long[] tokenTypeIds) {
        return forward(null, weights, inputIds, attentionMask, tokenTypeIds);
    }

    /** As {@link #forward(long, long[], long[], long[])} through {@code method} (the task's
     *  own, loaded on first use; null: the one loaded with the program). */
    public float[] forward(String method, long weights, long[] inputIds, long[] attentionMask,
            long[] tokenTypeIds) {
        if (handle == 0L) {
            throw new IllegalStateException("program is closed");
        }
        return nativeForward(handle, method, weights, inputIds, attentionMask, tokenTypeIds);
    }

    @Override
    public void close() {
        if (handle != 0L) {
            nativeFree(handle);
        }
        handle = 0L;
    }

    private static native long nativeLoad(String program, String data, String method, int threads);

    private static native long nativeBind(String weights, String[] inputNames);

    private static native float[] nativeForward(long handle, String method, long weights,
            long[] inputIds, long[] attentionMask, long[] tokenTypeIds);

    private static native void nativeFreeWeights(long weights);

    private static native void nativeFree(long handle);
}
