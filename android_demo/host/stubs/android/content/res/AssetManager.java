// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py), like android.jar's
// stubs: only the members the app calls. Signatures from the Android SDK's published source,
// AOSP frameworks/base/core/java/android/content/res/AssetManager.java (API 35).
package android.content.res;

import java.io.IOException;
import java.io.InputStream;

public final class AssetManager implements AutoCloseable {
    private AssetManager() {}

    public String[] list(String path) throws IOException {
        throw new RuntimeException("Stub!");
    }

    public InputStream open(String fileName) throws IOException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() {
        throw new RuntimeException("Stub!");
    }
}
