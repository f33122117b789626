package io.palkit.demo.runtime

/** A loaded ExecuTorch task program bound to the shared trunk data file (see cpp/). */
class ExecuTorchProgram(programPath: String, trunkDataPath: String, threads: Int) : AutoCloseable {
    private var handle: Long = nativeLoad(programPath, trunkDataPath, threads)

    fun forward(inputIds: LongArray, attentionMask: LongArray, tokenTypeIds: LongArray): FloatArray {
        check(handle != 0L) { "program is closed" }
        return nativeForward(handle, inputIds, attentionMask, tokenTypeIds)
    }

    override fun close() {
        if (handle != 0L) nativeFree(handle)
        handle = 0L
    }

    private companion object {
        init {
            System.loadLibrary("palkit_executorch")
        }

        @JvmStatic external fun nativeLoad(program: String, data: String, threads: Int): Long

        @JvmStatic external fun nativeForward(
            handle: Long, inputIds: LongArray, attentionMask: LongArray, tokenTypeIds: LongArray,
        ): FloatArray

        @JvmStatic external fun nativeFree(handle: Long)
    }
}
