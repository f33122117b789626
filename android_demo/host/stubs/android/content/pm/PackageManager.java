// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py), like android.jar's
// stubs: only the members the app calls. Signatures from the Android SDK's published source,
// AOSP frameworks/base/core/java/android/content/pm/PackageManager.java (API 35), where the
// int-flags getPackageInfo is deprecated since API 33 (the app suppresses that warning).
// NameNotFoundException extends android.util.AndroidException there, an Exception.
package android.content.pm;

public abstract class PackageManager {
    public static class NameNotFoundException extends Exception {
        public NameNotFoundException() {}
    }

    @Deprecated
    public abstract PackageInfo getPackageInfo(String packageName, int flags)
            throws NameNotFoundException;
}
