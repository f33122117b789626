package io.palkit.core.bundle;

import java.io.File;

/**
 * A bundle refused by {@link BundleSignature}: the message is "FILE: what is wrong; what to do",
 * and {@link #reason} is the same code runtime/signing.py gives (unsigned, bad_format, wrong_key,
 * bad_signature, manifest_changed, file_missing, file_changed, file_unsigned, bad_key).
 */
public final class BundleSignatureException extends BundleException {
    public final File file;
    public final String reason;

    public BundleSignatureException(File file, String reason, String message) {
        super(file + ": " + message);
        this.file = file;
        this.reason = reason;
    }
}
