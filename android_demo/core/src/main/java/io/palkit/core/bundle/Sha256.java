package io.palkit.core.bundle;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/** Lower-case hex SHA-256 of a file or of bytes, as the manifest and model.sig write it. */
final class Sha256 {
    private Sha256() {}

    static String of(File file) throws BundleException {
        try (InputStream in = new FileInputStream(file)) {
            MessageDigest digest = newDigest();
            // small: a bundle opens by hashing every file (34 at 30 tasks), each with its own
            // buffer, and 1 MiB ones left 31 MB of garbage resident in the host JVM's heap
            byte[] buffer = new byte[1 << 16];
            int n;
            while ((n = in.read(buffer)) > 0) {
                digest.update(buffer, 0, n);
            }
            return hex(digest.digest());
        } catch (IOException e) {
            throw new BundleException("cannot read " + file + ": " + e.getMessage(), e);
        }
    }

    static String of(byte[] data) {
        return hex(newDigest().digest(data));
    }

    private static MessageDigest newDigest() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }

    private static String hex(byte[] bytes) {
        StringBuilder hex = new StringBuilder(2 * bytes.length);
        for (byte b : bytes) {
            hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return hex.toString();
    }
}
