package io.palkit.demo

import android.content.Context
import io.palkit.core.bundle.BundleSignature
import java.io.File
import java.security.PublicKey

/**
 * The bundle publisher's ECDSA P-256 public key (`palkit keygen`'s .pub.pem), shipped in the APK
 * as `assets/trusted_key.pem`. When it is there, every bundle, shipped or pushed, must carry
 * that key's valid model.sig; when it is not, bundles are checked against their manifest's
 * hashes only and unsigned ones load.
 */
object TrustedKey {
    const val ASSET = "trusted_key.pem"

    /** The key, or null when the APK ships none; a malformed key throws BundleException. */
    fun load(context: Context): PublicKey? {
        if (context.assets.list("")?.contains(ASSET) != true) return null
        return context.assets.open(ASSET).use { BundleSignature.readTrustedKey(it, File("assets", ASSET)) }
    }
}
