"""The app's Kotlin, compiled here: every file that needs no Jetpack Compose, with kotlinc at the
app's Kotlin version, against the compiled core, a BuildConfig generated as the Gradle file would,
and stubs of the Android and ONNX Runtime classes it calls (android_demo/tools/kotlin_check.py,
android_demo/host/stubs). Skipped, with the reason and the install command, without kotlinc.
The Compose screens (MainActivity, ui/) need androidx from Google's Maven: not compiled here.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from testing_utils import REPO

KOTLIN_CHECK = REPO / "android_demo/tools/kotlin_check.py"


def _load():
    name = "palkit_kotlin_check"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, KOTLIN_CHECK)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


kotlin_check = _load()


@pytest.fixture(scope="module")
def compiler() -> Path:
    reason = kotlin_check.missing_toolchain()
    if reason:
        pytest.skip(reason)
    return kotlin_check.kotlinc()


def test_without_kotlinc_the_reason_names_the_install_command(monkeypatch):
    monkeypatch.setattr(kotlin_check, "kotlinc", lambda: None)
    assert kotlin_check.missing_toolchain() == (
        "no kotlinc 2.1.0 (the app's Kotlin): `npm install --prefix "
        f"{kotlin_check.NPM_PREFIX} kotlin-compiler@2.1.0`")


def test_ci_installs_the_apps_kotlin_version():
    ci = (REPO / ".ci/run").read_text()
    version = kotlin_check.app_kotlin_version()
    assert f"--prefix android_demo/build/kotlin kotlin-compiler@{version}" in ci


def test_the_checked_files_are_every_kotlin_file_without_compose():
    names = [str(p.relative_to(kotlin_check.APP_SOURCES / "io/palkit/demo"))
             for p in kotlin_check.non_compose_sources()]
    assert names == ["BundleLocator.kt", "BundleSession.kt", "Prediction.kt", "TrustedKey.kt",
                     "bench/Benchmark.kt", "runtime/ExecuTorchTaskRunner.kt",
                     "runtime/OrtTaskRunner.kt", "runtime/TaskRunner.kt"]


def test_build_config_holds_what_the_gradle_file_sets():
    source = kotlin_check.build_config_source()
    assert "package io.palkit.demo;" in source
    for line in ['APPLICATION_ID = "io.palkit.demo";', "VERSION_CODE = 1;",
                 'VERSION_NAME = "0.1.0";', 'EXECUTORCH_VERSION = "1.5.1";',
                 'ONNXRUNTIME_VERSION = "1.31.0";']:
        assert f"  public static final {'int' if 'CODE' in line else 'String'} {line}" in source


def _compile(compiler: Path, stubs: Path, out: Path, sources: list[Path] | None = None):
    java = kotlin_check.compile_java(out / "java", stubs)
    assert java.returncode == 0, java.stderr[-3000:]
    return kotlin_check.compile_kotlin(sources or kotlin_check.non_compose_sources(),
                                       out / "java", out / "kotlin", compiler)


def test_the_apps_kotlin_compiles_against_the_core_and_the_stubs(compiler, tmp_path):
    done = _compile(compiler, kotlin_check.STUBS, tmp_path)
    assert done.returncode == 0, done.stderr[-6000:]
    classes = {str(p.relative_to(tmp_path / "kotlin/io/palkit/demo"))
               for p in (tmp_path / "kotlin").rglob("*.class")}
    assert {"BundleLocator.class", "BundleSession.class", "PredictionKt.class",
            "TrustedKey.class", "bench/Benchmark.class", "runtime/ExecuTorchTaskRunner.class",
            "runtime/OrtTaskRunner.class", "runtime/TaskRunner.class"} <= classes


def test_a_call_that_no_longer_matches_a_stub_fails_the_compile(compiler, tmp_path):
    stubs = tmp_path / "stubs"
    shutil.copytree(kotlin_check.STUBS, stubs)
    for path, old, new in [
            ("ai/onnxruntime/OrtSession.java", "setIntraOpNumThreads(int", "setIntraOpThreads(int"),
            ("android/content/Context.java", "getExternalFilesDir(String",
             "getExternalFilesDir(int")]:
        source = (stubs / path).read_text()
        assert old in source
        (stubs / path).write_text(source.replace(old, new))
    # the files that call the changed stubs and the interface one implements (the whole app is
    # the test above's): kotlinc's time grows with the sources
    app = kotlin_check.APP_SOURCES / "io/palkit/demo"
    done = _compile(compiler, stubs, tmp_path, [app / "BundleLocator.kt",
                                                app / "runtime/OrtTaskRunner.kt",
                                                app / "runtime/TaskRunner.kt"])
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert any("OrtTaskRunner.kt" in e and "setIntraOpNumThreads" in e for e in errors), errors
    # getExternalFilesDir(null) no longer fits a parameter of type int
    assert any("BundleLocator.kt" in e and "null cannot be a value of a non-null type" in e
               for e in errors), errors
