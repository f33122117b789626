// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py), like android.jar's
// stubs: only the members the app reads. Signatures from the Android SDK's published source,
// AOSP frameworks/base/core/java/android/content/pm/PackageInfo.java (API 35).
package android.content.pm;

public class PackageInfo {
    public String packageName;
    public long lastUpdateTime;
}
