// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py), like android.jar's
// stubs: only the members the app reads. Signatures from the Android SDK's published source,
// AOSP frameworks/base/core/java/android/os/Build.java (API 35). Values are never read here.
package android.os;

public class Build {
    public static final String MANUFACTURER = null;
    public static final String MODEL = null;
    public static final String[] SUPPORTED_ABIS = null;

    public static class VERSION {
        public static final String RELEASE = null;
    }
}
