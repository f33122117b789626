package io.palkit.demo

import android.content.Context
import java.io.File

/**
 * Where the bundle lives: a folder pushed with `adb push` into the app's external files dir
 * wins; otherwise a bundle shipped under assets/bundle/ is copied once to internal
 * storage (runtimes need real file paths to mmap).
 */
object BundleLocator {
    /** adb can write here without root: /sdcard/Android/data/io.palkit.demo/files/bundle */
    fun pushedDir(context: Context): File? = context.getExternalFilesDir(null)?.let { File(it, "bundle") }

    fun locate(context: Context): File? {
        pushedDir(context)?.takeIf { File(it, "manifest.json").isFile }?.let { return it }
        val assets = context.assets
        if (assets.list("bundle")?.contains("manifest.json") != true) return null
        val target = File(context.filesDir, "bundle")
        copyAssets(context, "bundle", target)
        return target
    }

    private fun copyAssets(context: Context, path: String, target: File) {
        val children = context.assets.list(path).orEmpty()
        if (children.isEmpty()) {
            // Always recopy: a stale copy from an older APK would fail its SHA-256 check anyway.
            target.parentFile?.mkdirs()
            context.assets.open(path).use { input -> target.outputStream().use { input.copyTo(it) } }
            return
        }
        children.forEach { copyAssets(context, "$path/$it", File(target, it)) }
    }
}
