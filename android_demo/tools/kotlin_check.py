"""The app's Kotlin that needs no Jetpack Compose, compiled on this machine.

The runners, BundleSession, BundleLocator, TrustedKey, Benchmark and Prediction are compiled
with kotlinc at the app's Kotlin version (npm's kotlin-compiler) against the app's compiled Java
(core and io.palkit.demo.runtime), a BuildConfig generated from app/build.gradle.kts as the
Android Gradle plugin would, and host/stubs: the few Android and ONNX Runtime classes and members
they call, each stub file naming the published source its signatures come from. A call that no
longer matches a stub (a renamed method, another parameter type) fails the compile. The Compose
screens import androidx, which only Google's Maven serves: they are not compiled here.
Used by tests/test_android_kotlin.py.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

ANDROID_DEMO = Path(__file__).resolve().parents[1]
APP = ANDROID_DEMO / "app"
APP_SOURCES = APP / "src/main/java"
STUBS = ANDROID_DEMO / "host/stubs"
CATALOG = ANDROID_DEMO / "gradle/libs.versions.toml"
KOTLINC_ENV = "PALKIT_KOTLINC"
NPM_PREFIX = ANDROID_DEMO / "build/kotlin"  # `npm install --prefix` puts kotlinc under it


def app_kotlin_version() -> str:
    return tomllib.loads(CATALOG.read_text())["versions"]["kotlin"]


def install_command() -> str:
    return f"npm install --prefix {NPM_PREFIX} kotlin-compiler@{app_kotlin_version()}"


def kotlinc() -> Path | None:
    """PALKIT_KOTLINC, else npm's kotlinc under android_demo/build/kotlin, else `kotlinc`."""
    for candidate in (os.environ.get(KOTLINC_ENV),
                      NPM_PREFIX / "node_modules/kotlin-compiler/bin/kotlinc",
                      shutil.which("kotlinc")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def kotlinc_version(compiler: Path) -> str:
    """From the distribution's build.txt ("2.1.0-release-394"), without starting a JVM."""
    build_txt = Path(os.path.realpath(compiler)).parents[1] / "build.txt"
    return build_txt.read_text().split("-")[0].strip() if build_txt.is_file() else "unknown"


def missing_toolchain() -> str | None:
    """Why the Kotlin check cannot run here, or None."""
    wanted = app_kotlin_version()
    compiler = kotlinc()
    if compiler is None:
        return f"no kotlinc {wanted} (the app's Kotlin): `{install_command()}`"
    if kotlinc_version(compiler) != wanted:
        return (f"{compiler} is Kotlin {kotlinc_version(compiler)}, the app's is {wanted}: "
                f"`{install_command()}`")
    for tool in ("javac", "java"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found on PATH: the Kotlin check needs a JDK (17+)"
    return None


def non_compose_sources() -> list[Path]:
    """Every Kotlin file of the app that imports nothing from androidx."""
    return sorted(p for p in APP_SOURCES.rglob("*.kt")
                  if not re.search(r"^import androidx\.", p.read_text(), re.M))


def build_config_source() -> str:
    """BuildConfig.java as the Android Gradle plugin generates it for a debug build of
    app/build.gradle.kts (its defaultConfig and buildConfigField lines, the catalog's versions)."""
    gradle = (APP / "build.gradle.kts").read_text()
    versions = tomllib.loads(CATALOG.read_text())["versions"]
    named = {name: versions[key] for name, key in
             re.findall(r"val (\w+) = libs\.versions\.(\w+)\.get\(\)", gradle)}

    def setting(key: str) -> str:
        return re.search(rf"\b{key} = \"?([^\"\n]+)\"?", gradle)[1]

    def resolve(value: str) -> str:
        value = re.sub(r"\$\{libs\.versions\.(\w+)\.get\(\)\}", lambda m: versions[m[1]], value)
        value = re.sub(r"\$(\w+)", lambda m: named[m[1]], value)
        return value.replace('\\"', '"')

    lines = ["/**", " * Automatically generated file. DO NOT MODIFY", " */",
             f"package {setting('namespace')};", "", "public final class BuildConfig {",
             '  public static final boolean DEBUG = Boolean.parseBoolean("true");',
             f'  public static final String APPLICATION_ID = "{setting("applicationId")}";',
             '  public static final String BUILD_TYPE = "debug";',
             f"  public static final int VERSION_CODE = {setting('versionCode')};",
             f'  public static final String VERSION_NAME = "{setting("versionName")}";']
    for kind, name, value in re.findall(r'buildConfigField\("(\w+)", "(\w+)", "(.*)"\)', gradle):
        lines += ["  // Field from default config.",
                  f"  public static final {kind} {name} = {resolve(value)};"]
    return "\n".join([*lines, "}", ""])


def compile_java(into: Path, stubs: Path = STUBS) -> subprocess.CompletedProcess:
    """The core, the app's Java, the stubs and the generated BuildConfig, with javac."""
    generated = into.parent / f"{into.name}-generated/io/palkit/demo/BuildConfig.java"
    generated.parent.mkdir(parents=True, exist_ok=True)
    generated.write_text(build_config_source())
    sources = [*(ANDROID_DEMO / "core/src/main/java").rglob("*.java"),
               *APP_SOURCES.rglob("*.java"), *stubs.rglob("*.java"), generated]
    return subprocess.run([shutil.which("javac"), "-encoding", "UTF-8", "-d", str(into),
                           *map(str, sources)], capture_output=True, text=True, timeout=300)


def compile_kotlin(sources: list[Path], java_classes: Path, into: Path,
                   compiler: Path) -> subprocess.CompletedProcess:
    """kotlinc on `sources` (jvmTarget 17, as the app) against the compiled Java and the
    distribution's kotlinx-coroutines."""
    coroutines = Path(os.path.realpath(compiler)).parents[1] / "lib/kotlinx-coroutines-core-jvm.jar"
    return subprocess.run([str(compiler), "-jvm-target", "17", "-classpath",
                           f"{java_classes}{os.pathsep}{coroutines}", "-d", str(into),
                           *map(str, sources)], capture_output=True, text=True, timeout=600)
