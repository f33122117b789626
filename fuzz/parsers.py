"""Coverage-guided fuzzing (atheris / libFuzzer) of palkit's parsers, one process per target.

    python -m fuzz.parsers all --runs 10000            # every target, counts -> fuzz/results.json
    python -m fuzz.parsers manifest --runs 200000 --seconds 600

A crash is anything but a refusal (PalkitError / ValueError) or a broken invariant, see
fuzz/targets.py. The fuzzer keeps going after one: each distinct crash (exception type and the
palkit line it came from) is counted, and its first input saved under fuzz/crashes/TARGET/.
A hang (one input over --timeout seconds) ends that target's process; `all` records it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent
RESULTS = HERE / "results.json"


def crash_signature(e: BaseException) -> str:
    """Exception type and the innermost frame in palkit's code: one per distinct bug."""
    from fuzz.targets import InvariantBroken
    if isinstance(e, InvariantBroken):
        return f"InvariantBroken: {e.what}"
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if str(ROOT) in f.filename and "/fuzz/" not in f.filename]
    where = f"{Path(frames[-1].filename).relative_to(ROOT)}:{frames[-1].lineno}" if frames \
        else "outside palkit"
    return f"{type(e).__name__} at {where}"


class Counts:
    def __init__(self, target: str, runs: int, seconds: float, out: Path, crash_dir: Path):
        self.target, self.runs, self.seconds, self.out = target, runs, seconds, out
        self.crash_dir = crash_dir
        self.inputs = self.accepted = self.refused = 0
        self.crashes: dict[str, dict[str, Any]] = {}
        self.start = time.monotonic()

    def record_crash(self, e: BaseException, data: bytes) -> None:
        sig = crash_signature(e)
        if sig not in self.crashes:
            folder = self.crash_dir / self.target
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / (hashlib.sha256(sig.encode()).hexdigest()[:12] + ".bin")
            path.write_bytes(data)
            shown = path.relative_to(ROOT) if ROOT in path.parents else path
            self.crashes[sig] = {"count": 0, "message": str(e)[:300], "reproducer": str(shown)}
        self.crashes[sig]["count"] += 1

    def done(self) -> bool:
        return self.inputs >= self.runs or time.monotonic() - self.start >= self.seconds

    def write(self) -> None:
        self.out.write_text(json.dumps({
            "inputs": self.inputs, "accepted": self.accepted, "refused": self.refused,
            "crashes": sum(c["count"] for c in self.crashes.values()),
            "distinct_crashes": self.crashes, "hangs": 0,
            "seconds": round(time.monotonic() - self.start, 1)}, indent=2))


def fuzz_one(target: str, runs: int, seconds: float, out: Path, timeout: int, seed: int,
             crash_dir: Path) -> None:
    """Fuzz one target in this process; writes its counts to `out` and exits."""
    import atheris

    from fuzz.targets import MODULES, REFUSALS, TARGETS

    with atheris.instrument_imports(include=MODULES[target]):
        fn = TARGETS[target]()
    counts = Counts(target, runs, seconds, out, crash_dir)

    def one_input(data: bytes) -> None:
        counts.inputs += 1
        try:
            fn(data)
            counts.accepted += 1
        except REFUSALS:
            counts.refused += 1
        except Exception as e:  # noqa: BLE001  (every other exception is what we count)
            counts.record_crash(e, data)
        if counts.done():
            counts.write()
            os._exit(0)  # libFuzzer never returns; stop here once the counts are written

    corpus = Path(tempfile.mkdtemp(prefix=f"palkit-corpus-{target}-"))
    seeds = HERE / "seeds" / target
    argv = [sys.argv[0], f"-timeout={timeout}", "-rss_limit_mb=4096", f"-seed={seed}",
            str(corpus)] + ([str(seeds)] if seeds.is_dir() else [])
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def fuzz_all(targets: list[str], runs: int, seconds: float, timeout: int,
             seed: int) -> dict[str, Any]:
    """Each target in its own process (under `nice`); returns {target: counts}."""
    results = {}
    for target in targets:
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        cmd = [sys.executable, "-m", "fuzz.parsers", target, "--runs", str(runs),
               "--seconds", str(seconds), "--timeout", str(timeout), "--seed", str(seed),
               "--out", str(out)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if out.stat().st_size:
            results[target] = json.loads(out.read_text())
        else:  # the process died: libFuzzer's timeout (a hang) or a native crash
            tail = proc.stderr.strip().splitlines()[-3:]
            results[target] = {"hangs": int("timeout" in proc.stderr.lower()),
                               "died": proc.returncode, "stderr_tail": tail}
        out.unlink()
        print(f"{target}: {results[target]}", file=sys.stderr)
    return results


def merge_results(section: str, data: dict[str, Any]) -> None:
    """fuzz/results.json keeps a section per runner ('parsers', 'runtimes')."""
    from palkit.core.fileio import write_json
    current = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    current[section] = data
    write_json(RESULTS, current)


def main() -> None:
    from fuzz.targets import TARGETS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", choices=[*TARGETS, "all"])
    p.add_argument("--runs", type=int, default=10_000, help="inputs per target")
    p.add_argument("--seconds", type=float, default=3600, help="time limit per target")
    p.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    p.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed (0: random)")
    p.add_argument("--out", type=Path, help="(one target) where to write its counts")
    p.add_argument("--crash-dir", type=Path, default=HERE / "crashes",
                   help="where each distinct crash's first input is saved (TARGET/...)")
    p.add_argument("--no-save", action="store_true", help="(all) do not update results.json")
    a = p.parse_args()
    if a.target != "all":
        fuzz_one(a.target, a.runs, a.seconds, a.out or Path(os.devnull), a.timeout, a.seed,
                 a.crash_dir.resolve())
        return
    results = fuzz_all(list(TARGETS), a.runs, a.seconds, a.timeout, a.seed)
    if not a.no_save:
        merge_results("parsers", {"command": " ".join(["python -m fuzz.parsers", *sys.argv[1:]]),
                                  "targets": results})


if __name__ == "__main__":
    main()
