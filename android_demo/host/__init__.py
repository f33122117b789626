"""Building and running the app's native path on a host (native_host): shipped with palkit for
bench's native subject and verify-arch. The app's dev tools (its Kotlin check, its character
tables) are in android_demo/tools/ and its golden-vector generators in tests/tools/, outside the
package."""
