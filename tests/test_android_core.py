"""The Android demo's pure-Java core (tokenizer, manifest, bundle checks) and its generated data.

The Gradle/Android build cannot run on this machine; this compiles android_demo/core and its
self-contained test runner with javac and runs them, and checks the files generated from the
Hugging Face tokenizer are not stale. Without a JDK the Java tests are skipped, with the reason:
a JDK is needed only for the app's core (and tests/test_native_jni.py), not for palkit itself.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ANDROID_DEMO = Path(__file__).resolve().parents[1] / "android_demo"
CORE = ANDROID_DEMO / "core"
GOLDEN = CORE / "src/test/resources/tokenizer_golden.json"
CHAR_TABLES = CORE / "src/main/java/io/palkit/core/tokenizer/BertCharTables.java"


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ANDROID_DEMO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jdk_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"`{name}` not found on PATH: the Android core tests need a JDK (17+), "
                    "e.g. `apt-get install openjdk-17-jdk-headless`")
    return path


def test_without_a_jdk_the_java_tests_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="need a JDK"):
        _jdk_tool("javac")


def test_java_core_tests_pass(tmp_path):
    javac, java = _jdk_tool("javac"), _jdk_tool("java")
    sources = sorted(str(p) for p in CORE.glob("src/*/java/**/*.java"))
    classes = tmp_path / "classes"
    compiled = subprocess.run([javac, "-encoding", "UTF-8", "-d", str(classes), *sources],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, f"javac failed:\n{compiled.stdout}{compiled.stderr}"

    vocab = _load_tool("make_golden").model_dir() / "vocab.txt"
    run = subprocess.run(
        [java, f"-Dpalkit.golden={GOLDEN}", f"-Dpalkit.vocab={vocab}",
         "-cp", str(classes), "io.palkit.core.TestMain"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"Java core tests failed:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    assert " 0 failed" in run.stdout


def test_golden_vectors_are_fresh():
    expected = _load_tool("make_golden").render()
    assert GOLDEN.read_text(encoding="utf-8") == expected, (
        "tokenizer_golden.json is stale: run `python android_demo/tools/make_golden.py`")


def test_char_tables_are_fresh():
    expected = _load_tool("make_char_tables").render()
    assert CHAR_TABLES.read_text(encoding="utf-8") == expected, (
        "BertCharTables.java is stale: run `python android_demo/tools/make_char_tables.py`")
