"""CI smoke of the fuzzers (fuzz/README.md has the long campaign): each atheris target on a few
hundred inputs with zero crashes in palkit's code, every saved crash input replayed, the
mutation runner's child handling (signal, hang, refusal, same or different outputs, shrinking)
on a stub runtime, and a handful of real ONNX Runtime mutations of a tiny bundle. About 25 s
in all with the tiny run built."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fuzz.runtimes import (STRATEGIES, Loader, Mutation, campaign, classify, in_child, mutations,
                           shrink)
from fuzz.targets import TARGETS
from testing_utils import HANG_GUARD_S, REPO

# Crashes the 200k-input campaign found in other modules' parsers (fuzz/README.md) that are still
# open; strict, so a marker goes as soon as the parser refuses its inputs. All are fixed now:
# each saved input is replayed as a regression test.
OPEN_FINDINGS: dict[str, str] = {}


def marked(targets, open_targets: set[str]) -> list:
    """The targets, those in `open_targets` marked as expected to fail (an open finding)."""
    return [pytest.param(t, marks=pytest.mark.xfail(reason=OPEN_FINDINGS[t], strict=True))
            if t in open_targets else t for t in sorted(targets)]


@pytest.mark.parametrize("target", marked(TARGETS, set(OPEN_FINDINGS)))
def test_parser_fuzzer_finds_no_crash(target, tmp_path):
    out = tmp_path / "counts.json"
    proc = subprocess.run([sys.executable, "-m", "fuzz.parsers", target, "--runs", "300",
                           "--seed", "1", "--out", str(out), "--crash-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(out.read_text())
    assert counts["inputs"] == 300
    assert counts["accepted"] + counts["refused"] + counts["crashes"] == 300
    assert counts["accepted"] > 0, "no input got through: the seeds no longer parse"
    assert counts["distinct_crashes"] == {}


def replay_crashes(target: str) -> list[str]:
    """Every saved crash input of `target` (fuzz/crashes/TARGET/) fed again; what still crashes."""
    from fuzz.parsers import crash_signature
    from fuzz.targets import REFUSALS

    fn, still = TARGETS[target](), []
    for path in sorted((REPO / "fuzz" / "crashes" / target).glob("*.bin")):
        try:
            fn(path.read_bytes())
        except REFUSALS:
            pass
        except Exception as e:  # noqa: BLE001  (anything else is the crash being replayed)
            still.append(f"{path.name}: {crash_signature(e)}")
    return still


@pytest.mark.parametrize("target", marked(
    (p.name for p in (REPO / "fuzz" / "crashes").iterdir()), set(OPEN_FINDINGS)))
def test_saved_crash_inputs_are_now_refused(target):
    assert replay_crashes(target) == []


# ---- the mutation runner on a stub runtime ---------------------------------------------------

class StubLoader(Loader):
    """Behaves by the first byte of the file: 0 run, 1 raise, 2 SIGSEGV, 3 hang, else other
    outputs. (No runtime: this checks the runner's fork / classify / shrink machinery.)"""

    def __init__(self) -> None:
        pass

    def run(self, root: Path, rel: str, level: str | None) -> list[float]:
        first = (root / rel).read_bytes()[:1] or b"\x01"
        if first == b"\x00":
            return [0.5, -0.5]
        if first == b"\x01":
            raise RuntimeError("Failed to load program, error: 0x:23")
        if first == b"\x02":
            os.kill(os.getpid(), signal.SIGSEGV)
        if first == b"\x03":
            time.sleep(60)
        return [0.5, 0.25]


@pytest.mark.parametrize("first, outcome", [(0, "loaded_same"), (1, "clean_error"),
                                            (2, "crash_signal"), (3, "hang"),
                                            (4, "loaded_different")])
def test_child_outcomes(tmp_path, first, outcome):
    (tmp_path / "f.bin").write_bytes(bytes([first, 9, 9]))
    # Only the stub that sleeps a minute may reach its timeout; the others have all the time
    # they need, so a loaded machine cannot turn them into hangs.
    timeout = 1.0 if outcome == "hang" else HANG_GUARD_S
    result = in_child(StubLoader(), tmp_path, "f.bin", None, timeout=timeout)
    assert classify(result, [0.5, -0.5]) == outcome
    if outcome == "crash_signal":
        assert result["signal"] == "SIGSEGV"


def test_crash_shrinks_to_the_byte_that_matters(tmp_path):
    original = bytes(64)
    m = Mutation("f.bin", "flip8_any", [[0, 2], [7, 1], [20, 5], [63, 9]])
    (tmp_path / "f.bin").write_bytes(m.apply(original))
    small = shrink(StubLoader(), tmp_path, m, original, None, timeout=HANG_GUARD_S)
    assert small.edits == [[0, 2]]
    assert (tmp_path / "f.bin").read_bytes() == original


def test_mutations_are_reproducible_and_change_the_file():
    import random

    original = bytes(range(256)) * 40
    for strategy in STRATEGIES:
        a = mutations("f", original, strategy, random.Random("s"))
        assert a == mutations("f", original, strategy, random.Random("s"))
        assert a.apply(original) != original
    head = mutations("f", original, "flip8_head", random.Random(1))
    assert len(head.edits) == 8 and all(o < 4096 for o, _ in head.edits)


# ---- real ONNX Runtime mutations of a tiny bundle --------------------------------------------

def test_onnx_adapter_mutations_are_counted(onnx_fp32):
    report = campaign(onnx_fp32, ["onnx/sst.onnx_adapter"], n=4, seed=0,
                      timeout=HANG_GUARD_S)
    counts = report["files"]["onnx/sst.onnx_adapter"]
    assert set(counts) == set(STRATEGIES)
    assert all(sum(c.values()) == 1 for c in counts.values())
    assert counts["truncate"]["clean_error"] == 1      # ORT refuses a cut adapter file
    assert sum(c["hang"] for c in counts.values()) == 0
