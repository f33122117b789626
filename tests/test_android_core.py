"""The Android demo's pure-Java core (tokenizer, manifest, bundle checks) and its generated data.

The Gradle/Android build cannot run on this machine; this compiles android_demo/core and its
self-contained test runner with javac and runs them (the signature verifier against the golden
vectors of runtime/signing.py included), runs a short smoke of the core's fuzzer, and checks the
files generated from the Hugging Face tokenizer are not stale. Without a JDK the Java tests are
skipped, with the reason: a JDK is needed only for the app's core (and tests/test_native_jni.py),
not for palkit itself.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from testing_utils import ANDROID_DEMO, HANG_GUARD_S, REPO, jdk_tool

CORE = ANDROID_DEMO / "core"
GOLDEN = CORE / "src/test/resources/tokenizer_golden.json"
CHAR_TABLES = CORE / "src/main/java/io/palkit/core/tokenizer/BertCharTables.java"
SIGNING = CORE / "src/test/resources/signing"  # tests/tools/make_signing_vectors.py's
DECODING = CORE / "src/test/resources/decoding/atis.json"  # tests/tools/make_decoding_golden.py's
TOKENIZER_GOLDEN = REPO / "tests/tools/make_tokenizer_golden.py"
CHAR_TABLES_TOOL = ANDROID_DEMO / "tools/make_char_tables.py"


def _load_tool(path: Path):
    """A generator script (android_demo/tools/ or tests/tools/), loaded by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_jdk_the_java_tests_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="need a JDK"):
        jdk_tool("javac")


def _java(classes: Path, main: str, *args: str,
          java: tuple[str, ...] | None = None) -> subprocess.CompletedProcess:
    vocab = _load_tool(TOKENIZER_GOLDEN).model_dir() / "vocab.txt"
    return subprocess.run(
        [*(java or (jdk_tool("java"),)), "-Xmx512m", f"-Dpalkit.golden={GOLDEN}", f"-Dpalkit.vocab={vocab}",
         f"-Dpalkit.signing={SIGNING}", f"-Dpalkit.decoding={DECODING}", "-cp", str(classes), main, *args],
        capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_java_core_tests_pass(core_classes):
    """Includes SignatureGoldenTest: every signature golden vector gives runtime/signing.py's
    verdict (expected.json), full and manifest-only, naming the same file."""
    run = _java(core_classes, "io.palkit.core.TestMain")
    assert run.returncode == 0, f"Java core tests failed:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    assert " 0 failed" in run.stdout
    assert "PASS SignatureGoldenTest.testEveryGoldenCaseGivesPythonsVerdicts" in run.stdout


def test_java_core_tests_pass_on_aarch64_under_qemu(core_classes):
    """The same tests on the phone's instruction set: an aarch64 JRE under qemu (the decoding
    golden's sigmoids and thresholds, the tokenizer's tables, signature checks as the phone
    computes them)."""
    from palkit.android_demo.host import native_host as host
    reason = host.missing_toolchain("aarch64")
    if reason:
        pytest.skip(reason)
    run = _java(core_classes, "io.palkit.core.TestMain", java=host.launcher("aarch64"))
    assert run.returncode == 0, f"Java core tests failed:\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    assert " 0 failed" in run.stdout
    assert "PASS DecodingGoldenTest." in run.stdout and "PASS TokenizerGoldenTest." in run.stdout


def test_fuzz_smoke_finds_no_crash_in_the_core_parsers(core_classes, tmp_path):
    """150 inputs of CoreFuzz per target, a count rather than a time, so a loaded machine runs
    the same inputs (the long campaign: android_demo/README.md). A hang is an input that takes
    a minute: far beyond any input's time, however busy the machine."""
    run = _java(core_classes, "io.palkit.core.fuzz.CoreFuzz", "--inputs", "150", "--seconds",
                "1e9", "--hang-ms", "60000", "--out", str(tmp_path))
    assert run.returncode == 0, f"fuzz crash or hang:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    rows = {row["target"]: row for row in json.loads(run.stdout)}
    assert set(rows) == {"json", "manifest", "signature", "tokenizer"}
    for name, row in rows.items():
        assert row["crashes"] == 0 and row["hangs"] == 0, row
        assert row["inputs"] == 150, row
        assert row["inputs"] == row["accepted"] + row["refused"], row
    # The parsers both accepted and refused inputs: the mutations reach past the first check.
    for name in ("json", "manifest"):
        assert rows[name]["accepted"] > 0 and rows[name]["refused"] > 0, rows[name]
    assert rows["tokenizer"]["accepted"] == rows["tokenizer"]["inputs"]  # text never fails
    assert rows["signature"]["refused"] > 0, rows["signature"]  # a valid one is rare by design
    # No crash reproducer, only each target's slowest input (for --replay).
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{t}-slowest.txt" for t in rows)


def test_golden_vectors_are_fresh():
    expected = _load_tool(TOKENIZER_GOLDEN).render()
    assert GOLDEN.read_text(encoding="utf-8") == expected, (
        "tokenizer_golden.json is stale: run `python tests/tools/make_tokenizer_golden.py`")


def test_char_tables_are_fresh():
    expected = _load_tool(CHAR_TABLES_TOOL).render()
    assert CHAR_TABLES.read_text(encoding="utf-8") == expected, (
        "BertCharTables.java is stale: run `python android_demo/tools/make_char_tables.py`")
