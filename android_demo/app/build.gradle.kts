plugins {
    alias(libs.plugins.android.application)
    alias(libs.plugins.kotlin.android)
    alias(libs.plugins.kotlin.compose)
}

// ExecuTorch's native build runs Python: its configure reads the installed torch's headers and its
// kernel code generation imports torchgen and yaml. palkit's own environment has all three.
val python: String = providers.gradleProperty("palkit.python")
    .orElse(providers.environmentVariable("PALKIT_PYTHON"))
    .orElse("python3")
    .get()
// One ExecuTorch checkout per tag, shared by every ABI and build variant (and kept by `clean`).
val executorchVersion = libs.versions.executorch.get()
val executorchCheckout = rootProject.layout.projectDirectory.dir(".executorch/v$executorchVersion")
// An ExecuTorch checkout already on disk (a folder named exactly `executorch`, submodules
// included): the build then needs no network.
val executorchSource: String? = providers.gradleProperty("palkit.executorchSource")
    .orElse(providers.environmentVariable("PALKIT_EXECUTORCH_SOURCE"))
    .orNull

android {
    namespace = "io.palkit.demo"
    compileSdk = 35
    // r28c, as ExecuTorch's Android CI; its libraries are linked for 16 KB pages (Android 15).
    ndkVersion = "28.2.13676358"

    defaultConfig {
        applicationId = "io.palkit.demo"
        minSdk = 26
        targetSdk = 35
        versionCode = 1
        versionName = "0.1.0"
        ndk { abiFilters += listOf("arm64-v8a", "x86_64") }
        // What the app was built with, compared on screen with the bundle's manifest.
        buildConfigField("String", "EXECUTORCH_VERSION", "\"$executorchVersion\"")
        buildConfigField("String", "ONNXRUNTIME_VERSION", "\"${libs.versions.onnxruntime.get()}\"")
        externalNativeBuild {
            cmake {
                // ExecuTorch is built from source at the pinned tag (see app/src/main/cpp/CMakeLists.txt).
                arguments += listOf(
                    "-DEXECUTORCH_GIT_TAG=v$executorchVersion",
                    "-DPALKIT_EXECUTORCH_CHECKOUT=${executorchCheckout.asFile.path}",
                    "-DPYTHON_EXECUTABLE=$python",
                    "-DANDROID_STL=c++_shared",
                    "-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON",
                )
                if (executorchSource != null) {
                    arguments += "-DFETCHCONTENT_SOURCE_DIR_EXECUTORCH=$executorchSource"
                }
            }
        }
    }

    externalNativeBuild {
        cmake {
            path = file("src/main/cpp/CMakeLists.txt")
            version = "3.31.1"
        }
    }

    buildFeatures {
        compose = true
        buildConfig = true
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }

    // Bundles are large and already compressed where it matters; keep assets mmap-able.
    androidResources { noCompress += listOf("pte", "ptd", "onnx", "onnx_adapter", "txt", "json") }
}

dependencies {
    implementation(project(":core"))
    implementation(libs.onnxruntime.android)
    implementation(platform(libs.compose.bom))
    implementation(libs.compose.material3)
    implementation(libs.compose.ui)
    implementation(libs.activity.compose)
    implementation(libs.lifecycle.runtime.compose)
    implementation(libs.lifecycle.viewmodel.compose)
    implementation(libs.coroutines.android)
}
