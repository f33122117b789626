"""Host build of the Android app's native ExecuTorch path, and a runner for it.

Compiles the app's own JNI source (app/src/main/cpp/palkit_executorch_jni.cpp, not a copy)
against the executorch wheel's C++ SDK and the JDK's JNI headers into
libpalkit_executorch.so, and the app's Java (core + io.palkit.demo.runtime) with the host
harness (host/java) into classes. Both are cached under android_demo/build/host/<hash>/, the
hash covering every source file and the compile command, so an edit rebuilds and nothing
stale is ever used. Used by tests/test_native_jni.py and bench/native.py.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ANDROID_DEMO = Path(__file__).resolve().parents[1]
JNI_SOURCE = ANDROID_DEMO / "app/src/main/cpp/palkit_executorch_jni.cpp"
JAVA_ROOTS = (ANDROID_DEMO / "core/src/main/java", ANDROID_DEMO / "app/src/main/java",
              ANDROID_DEMO / "host/java")
BUILD_ROOT = ANDROID_DEMO / "build/host"
HARNESS = "io.palkit.host.HostHarness"
# The wheel's libraries register the XNNPACK backend and the kernels from static constructors,
# so they must be linked even though no symbol of theirs is referenced directly.
SDK_LIBRARIES = ("executorch", "executorch_backend_xnnpack", "executorch_kernels_optimized",
                 "executorch_kernels_quantized", "executorch_threadpool")


class NativeBuildError(RuntimeError):
    """The compiler or javac rejected the sources (the message holds their output)."""


@dataclass(frozen=True)
class HostBuild:
    library_dir: Path
    classes: Path
    java: str

    def command(self, *args: str, max_heap_mb: int = 256) -> list[str]:
        """The `java` command line running the harness with `args` (see HostHarness.java)."""
        # A native crash writes its JVM report to the temp folder, not into the caller's folder.
        crash_report = Path(tempfile.gettempdir()) / "palkit-native-crash-%p.log"
        return [self.java, f"-Xmx{max_heap_mb}m", "-XX:+UseSerialGC",
                f"-XX:ErrorFile={crash_report}",
                f"-Djava.library.path={self.library_dir}", "-cp", str(self.classes), HARNESS,
                *args]


def missing_toolchain() -> str | None:
    """Why the host build cannot run here (no C++ compiler, no JDK), or None."""
    if not (shutil.which("c++") or shutil.which("g++")):
        return "no C++ compiler (c++ or g++) on PATH: the native host build needs one"
    for tool in ("javac", "java"):
        if shutil.which(tool) is None:
            return (f"`{tool}` not found on PATH: the native host build needs a JDK (17+), "
                    "e.g. `apt-get install openjdk-17-jdk-headless`")
    if not (jdk_home() / "include/jni.h").is_file():
        return f"no include/jni.h under {jdk_home()} (a JRE, not a JDK?)"
    return None


def jdk_home() -> Path:
    return Path(os.path.realpath(shutil.which("javac"))).parents[1]


def executorch_sdk() -> Path:
    """The executorch wheel's folder, holding include/ and lib/ (its C++ SDK)."""
    import executorch
    return Path(list(executorch.__path__)[0])


def compile_command(out: Path) -> list[str]:
    sdk, jdk = executorch_sdk(), jdk_home()
    compiler = shutil.which("c++") or shutil.which("g++")
    # -isystem: the SDK's own headers warn (deprecated members); those are not ours to fix.
    includes = [sdk / "include", sdk / "include/executorch/runtime/core/portable_type/c10",
                jdk / "include", jdk / "include/linux"]
    return [compiler, "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall",
            "-DC10_USING_CUSTOM_GENERATED_MACROS",
            *[a for d in includes for a in ("-isystem", str(d))],
            str(JNI_SOURCE), "-o", str(out), f"-L{sdk / 'lib'}", "-Wl,--no-as-needed",
            *[f"-l{name}" for name in SDK_LIBRARIES], "-Wl,--as-needed",
            f"-Wl,-rpath,{sdk / 'lib'}"]


def java_sources() -> list[Path]:
    return sorted(p for root in JAVA_ROOTS for p in root.rglob("*.java"))


def _fingerprint() -> str:
    digest = hashlib.sha256()
    digest.update(" ".join(compile_command(Path("lib.so"))).encode())
    for path in (JNI_SOURCE, *java_sources()):
        digest.update(str(path.relative_to(ANDROID_DEMO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build() -> HostBuild:
    """The library and classes for the current sources, built once and then reused."""
    reason = missing_toolchain()
    if reason:
        raise NativeBuildError(reason)
    folder = BUILD_ROOT / _fingerprint()
    if not folder.is_dir():
        BUILD_ROOT.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=BUILD_ROOT))
        try:
            _compile(staging)
            try:
                os.replace(staging, folder)  # atomic: readers never see a half-built folder
            except OSError:
                if not folder.is_dir():  # else another process built the same sources first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return HostBuild(library_dir=folder, classes=folder / "classes", java=shutil.which("java"))


def _compile(into: Path) -> None:
    steps = [compile_command(into / "libpalkit_executorch.so"),
             [shutil.which("javac"), "-encoding", "UTF-8",
              "-d", str(into / "classes"), *map(str, java_sources())]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise NativeBuildError(f"{Path(step[0]).name} failed:\n{done.stdout}{done.stderr}")


if __name__ == "__main__":
    print(build().library_dir)
