"""The Android demo app. Its host build (android_demo/host) is shipped with palkit: bench's
native subject and verify-arch compile the app's own JNI and Java sources, shipped as package
data, on the host or for aarch64 under qemu."""
