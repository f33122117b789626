package io.palkit.core.bundle;

import java.io.File;
import java.io.IOException;

/** Manifest paths must stay inside the bundle folder (BUNDLE.md: relative, '/', no '..'). */
final class BundlePaths {
    private BundlePaths() {}

    static void requireInside(String path) throws BundleException {
        if (path.isEmpty() || path.startsWith("/") || path.contains("\\")
                || path.indexOf('\0') >= 0) {
            throw escape(path);
        }
        for (String segment : path.split("/", -1)) {
            if (segment.isEmpty() || segment.equals(".") || segment.equals("..")) {
                throw escape(path);
            }
        }
    }

    /** Catches a symlink inside the bundle that points outside it. */
    static void requireNoSymlinkEscape(File dir, File file) throws BundleException {
        try {
            String root = dir.getCanonicalPath() + File.separator;
            if (!file.getCanonicalPath().startsWith(root)) {
                throw escape(file.getPath());
            }
        } catch (IOException e) {
            throw new BundleException("cannot resolve " + file + ": " + e.getMessage(), e);
        }
    }

    private static BundleException escape(String path) {
        return new BundleException("manifest path \"" + path + "\" escapes the bundle folder");
    }
}
