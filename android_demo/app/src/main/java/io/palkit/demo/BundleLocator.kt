package io.palkit.demo

import android.content.Context
import java.io.File

/**
 * Where the bundle lives: a folder pushed with `adb push` into the app's external files dir
 * wins; otherwise a bundle shipped under assets/bundle/ is copied to internal storage (runtimes
 * need real file paths to mmap), once per installed APK.
 */
object BundleLocator {
    /** adb can write here without root: /sdcard/Android/data/io.palkit.demo/files/bundle */
    fun pushedDir(context: Context): File? = context.getExternalFilesDir(null)?.let { File(it, "bundle") }

    fun locate(context: Context): File? {
        pushedDir(context)?.takeIf { File(it, "manifest.json").isFile }?.let { return it }
        val assets = context.assets
        if (assets.list("bundle")?.contains("manifest.json") != true) return null
        val target = File(context.filesDir, "bundle")
        val stampFile = File(context.filesDir, "bundle.apk-stamp")
        val stamp = apkStamp(context)
        if (target.isDirectory && stampFile.isFile && stampFile.readText() == stamp) return target
        // A new APK (or a first start): copy into a fresh folder and swap it in whole, so a file
        // some runtime still has mapped is unlinked, never overwritten in place.
        val fresh = File(context.filesDir, "bundle.copying").apply { deleteRecursively() }
        copyAssets(context, "bundle", fresh)
        target.deleteRecursively()
        check(fresh.renameTo(target)) { "could not move $fresh to $target" }
        stampFile.writeText(stamp)
        return target
    }

    /** Changes whenever a new APK is installed, and with it possibly the bundled assets. */
    @Suppress("DEPRECATION") // the int-flags overload is the one available on every minSdk
    private fun apkStamp(context: Context): String =
        context.packageManager.getPackageInfo(context.packageName, 0).lastUpdateTime.toString()

    private fun copyAssets(context: Context, path: String, target: File) {
        val children = context.assets.list(path).orEmpty()
        if (children.isEmpty()) {
            target.parentFile?.mkdirs()
            context.assets.open(path).use { input -> target.outputStream().use { input.copyTo(it) } }
            return
        }
        children.forEach { copyAssets(context, "$path/$it", File(target, it)) }
    }
}
