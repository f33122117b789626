// A compile-time stand-in for the Kotlin check (tests/test_android_kotlin.py), like android.jar's
// stubs: only the members the app calls. Signatures from the Android SDK's published source,
// AOSP frameworks/base/core/java/android/content/Context.java (API 35, the app's compileSdk).
// Nullability annotations are left out: Kotlin sees platform types here.
package android.content;

import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import java.io.File;

public abstract class Context {
    public abstract AssetManager getAssets();

    public abstract PackageManager getPackageManager();

    public abstract String getPackageName();

    public abstract File getFilesDir();

    public abstract File getExternalFilesDir(String type);
}
