"""Process-isolated mutation runner: how ExecuTorch and ONNX Runtime take damaged bundle files.

    python -m fuzz.runtimes BUNDLE --mutations 30            # counts -> fuzz/results.json
    python -m fuzz.runtimes BUNDLE --files executorch/trunk.ptd --mutations 200 --seed 1

For each file (trunk.ptd, a task's .pte, a task's .onnx_adapter by default) it writes N mutated
copies into a scratch copy of the bundle, one at a time, and loads each in a forked child
straight through the runtime (palkit's hash checks bypassed on purpose: this measures the
runtimes) on one fixed input. The parent imports the runtimes but never runs them, so every
child starts from the same untouched state. ExecuTorch files are loaded at both program
verification levels (the same mutations): `Minimal` (the pybindings' `_load_program` default)
and `InternalConsistency` (`Runtime.load_program`'s default, which runtime/runners.py's
`load_executorch_program` asks for: every palkit path, bench's worker included). Outcomes:

  clean_error        the runtime raised an exception (what palkit turns into a BundleError)
  loaded_same        loaded and ran; outputs equal the intact file's
  loaded_different   loaded and ran; other outputs (a silent corruption)
  crash_signal       the child died of a signal (SIGSEGV, SIGABRT, ...)
  hang               no answer within --timeout seconds (killed)

Each crash is shrunk to the fewest changed bytes that still crash it (one byte at a time
restored), and recorded with its offsets so docs/records/runtime-crashes.md can cite it.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fuzz.parsers import merge_results
from palkit.runtime.manifest import TEXT_INPUTS

STRATEGIES = ("flip8_head", "flip8_any", "truncate", "zero64")
LEVELS = ("Minimal", "InternalConsistency")  # ExecuTorch program verification
OUTCOMES = ("clean_error", "loaded_same", "loaded_different", "crash_signal", "hang")


@dataclass
class Mutation:
    file: str                    # bundle-relative path
    strategy: str
    edits: list[list[int]]       # [offset, new byte] pairs
    truncate_to: int | None = None

    def apply(self, original: bytes) -> bytes:
        data = bytearray(original if self.truncate_to is None else original[:self.truncate_to])
        for offset, value in self.edits:
            data[offset] = value
        return bytes(data)


def mutations(file: str, original: bytes, strategy: str, rng: random.Random) -> Mutation:
    n = len(original)
    if strategy == "truncate":
        return Mutation(file, strategy, [], rng.randrange(0, n))

    def flip(offset: int) -> list[int]:
        return [offset, original[offset] ^ rng.randrange(1, 256)]

    if strategy == "flip8_head":
        return Mutation(file, strategy, [flip(o) for o in rng.sample(range(min(n, 4096)), 8)])
    if strategy == "flip8_any":
        return Mutation(file, strategy, [flip(o) for o in rng.sample(range(n), 8)])
    start = rng.randrange(0, max(1, n - 64))
    return Mutation(file, strategy, [[o, 0] for o in range(start, min(n, start + 64))
                                     if original[o] != 0])


# ---- loading in a child ----------------------------------------------------------------------

class Loader:
    """Imports both runtimes once (in the parent); `run(file)` is what each child does."""

    def __init__(self, bundle: Path):
        import onnxruntime

        from palkit.bench.worker import synthetic_input
        from palkit.runtime.manifest import read_manifest
        from palkit.runtime.runners import executorch_lib

        self.bundle, self.manifest = bundle, read_manifest(bundle)
        self.et = executorch_lib() if "executorch" in self.manifest.runtimes else None
        self.ort = onnxruntime
        vocab = len((bundle / self.manifest.tokenizer.vocab_file).read_text().splitlines())
        self.inputs = synthetic_input(16, vocab)

    def owner(self, rel: str) -> tuple[str, str]:
        """(runtime, task whose run reads `rel`): the trunk's files go with any task."""
        for t in self.manifest.tasks:
            for runtime, path in t.files.items():
                if path == rel:
                    return runtime, t.name
        runtime = next(r for r in self.manifest.runtime_names
                       if rel in self.manifest.runtimes[r].runtime_files)
        return runtime, self.manifest.tasks[0].name

    def run(self, root: Path, rel: str, level: str | None) -> list[float]:
        runtime, task = self.owner(rel)
        files = self.manifest.task(task).files
        if runtime == "executorch":
            import torch

            from palkit.runtime.runners import read_task_weights
            section = self.manifest.runtimes["executorch"]
            program = self.et._load_program(str(root / section.program),
                                            data_path=str(root / section.trunk_data),
                                            program_verification=getattr(self.et.Verification,
                                                                         level))
            method = program.load_method(section.method)
            weights = read_task_weights(root / files["executorch"], section.task_inputs)
            out = method((*(torch.from_numpy(self.inputs[k]) for k in TEXT_INPUTS), *weights))[0]
            return np.asarray(out).ravel().tolist()
        opts = self.ort.SessionOptions()
        opts.log_severity_level = 4
        session = self.ort.InferenceSession(str(root / self.manifest.trunk_file(runtime)), opts,
                                            providers=["CPUExecutionProvider"])
        adapter = self.ort.LoraAdapter()
        adapter.Load(str(root / files["onnxruntime"]))
        options = self.ort.RunOptions()
        options.add_active_adapter(adapter)
        return session.run(["logits"], self.inputs, options)[0].ravel().tolist()


def in_child(loader: Loader, root: Path, rel: str, level: str | None,
             timeout: float) -> dict[str, Any]:
    """Fork; the child loads and runs `rel` and reports through a pipe. Returns the result (a
    crash with the last lines the runtime logged: its assertion, when it had one)."""
    read_fd, write_fd = os.pipe()
    log = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.dup2(log.fileno(), 2)
        faulthandler.disable()  # a crash is the measurement, not the parent's stack on the terminal
        try:
            report = {"outputs": loader.run(root, rel, level)}
        except BaseException as e:  # noqa: BLE001  (a refusal of any kind is the measurement)
            report = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        os.write(write_fd, json.dumps(report).encode())
        os._exit(0)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            log.close()
            return {"outcome": "hang"}
        time.sleep(0.01)
    with os.fdopen(read_fd, "rb") as f:
        raw = f.read()
    log.seek(0)
    lines = [line for line in log.read().decode("utf-8", "replace").splitlines()
             if "cpuinfo" not in line][-2:]
    log.close()
    if os.WIFSIGNALED(status):
        return {"outcome": "crash_signal", "signal": signal.Signals(os.WTERMSIG(status)).name,
                "log": lines}
    return json.loads(raw) if raw else {"outcome": "crash_signal", "signal": f"exit {status}",
                                        "log": lines}


def crash_kind(result: dict[str, Any]) -> str:
    """Signal and the runtime source line it logged last: 'SIGABRT method.cpp:1788'. An abort
    from a log line Python could not decode (pybindings) is 'SIGABRT log-decode'."""
    text = "\n".join(result.get("log") or [])
    if "UnicodeDecodeError" in text:
        return f"{result['signal']} log-decode"
    sites = re.findall(r"\[([\w.]+:\d+)\]", text)
    return f"{result['signal']} {sites[-1] if sites else 'no log'}"


def classify(result: dict[str, Any], baseline: list[float]) -> str:
    if "outcome" in result:
        return result["outcome"]
    if "error" in result:
        return "clean_error"
    same = len(result["outputs"]) == len(baseline) and np.allclose(
        result["outputs"], baseline, rtol=0, atol=1e-6, equal_nan=True)
    return "loaded_same" if same else "loaded_different"


# ---- the campaign ----------------------------------------------------------------------------

def shrink(loader: Loader, root: Path, m: Mutation, original: bytes, level: str | None,
           timeout: float) -> Mutation:
    """Restore changed bytes one at a time while the child still crashes: a minimal mutation."""
    target = root / m.file
    edits = list(m.edits)
    for edit in list(edits):
        trial = Mutation(m.file, m.strategy, [e for e in edits if e != edit], m.truncate_to)
        target.write_bytes(trial.apply(original))
        if in_child(loader, root, m.file, level, timeout).get("outcome") == "crash_signal":
            edits = trial.edits
    target.write_bytes(original)
    return Mutation(m.file, m.strategy, edits, m.truncate_to)


def campaign(bundle: Path, files: list[str], n: int, seed: int,
             timeout: float) -> dict[str, Any]:
    """n mutations of each file (strategies in turn) at each verification level; counts, and
    every crash shrunk. Keys: "FILE" (ONNX Runtime) or "FILE @ LEVEL" (ExecuTorch)."""
    work = Path(tempfile.mkdtemp(prefix="palkit-mutate-"))
    root = work / "bundle"
    shutil.copytree(bundle, root)
    loader = Loader(root)
    report: dict[str, Any] = {"bundle": str(bundle), "seed": seed, "mutations_per_file": n,
                              "files": {}, "crashes": []}
    try:
        for rel in files:
            runtime, _ = loader.owner(rel)
            for level in LEVELS if runtime == "executorch" else (None,):
                key = f"{rel} @ {level}" if level else rel
                report["files"][key] = mutate_file(loader, root, rel, level, n,
                                                   random.Random(f"{seed}/{rel}"), timeout,
                                                   report["crashes"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def mutate_file(loader: Loader, root: Path, rel: str, level: str | None, n: int,
                rng: random.Random, timeout: float, crashes: list) -> dict[str, dict[str, int]]:
    """One file's n mutations: {strategy: {outcome: count}}; crashes appended to `crashes`."""
    original = (root / rel).read_bytes()
    baseline = in_child(loader, root, rel, level, timeout)
    if "outputs" not in baseline:
        raise SystemExit(f"{root / rel}: the intact file does not load ({baseline})")
    counts = {s: dict.fromkeys(OUTCOMES, 0) for s in STRATEGIES}
    for i in range(n):
        m = mutations(rel, original, STRATEGIES[i % len(STRATEGIES)], rng)
        (root / rel).write_bytes(m.apply(original))
        result = in_child(loader, root, rel, level, timeout)
        outcome = classify(result, baseline["outputs"])
        counts[m.strategy][outcome] += 1
        if outcome in ("crash_signal", "hang"):
            small = shrink(loader, root, m, original, level, timeout) \
                if outcome == "crash_signal" else m
            crashes.append({**asdict(small), "verification": level, "outcome": outcome,
                            "kind": crash_kind(result) if outcome == "crash_signal" else "hang",
                            "log": result.get("log"), "original_edits": len(m.edits)})
        (root / rel).write_bytes(original)
        print(f"{rel} {level or ''} #{i} {m.strategy}: {outcome}", file=sys.stderr)
    return counts


def default_files(bundle: Path) -> list[str]:
    from palkit.runtime.manifest import read_manifest
    m = read_manifest(bundle)
    task = m.tasks[0]
    files = []
    if "executorch" in m.runtimes:
        files += [*m.runtimes["executorch"].runtime_files, task.files["executorch"]]
    if "onnxruntime" in m.runtimes:
        files.append(task.files["onnxruntime"])
    return files


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--files", nargs="*", help="bundle paths (default: trunk.ptd, a task's .pte "
                                              "and .onnx_adapter)")
    p.add_argument("--mutations", type=int, default=30, help="per file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before a child is a hang")
    p.add_argument("--section", default="runtimes", help="results.json key to write")
    p.add_argument("--no-save", action="store_true", help="print, do not update results.json")
    a = p.parse_args()
    report = campaign(a.bundle, a.files or default_files(a.bundle), a.mutations, a.seed,
                      a.timeout)
    report["command"] = " ".join(["python -m fuzz.runtimes", *sys.argv[1:]])
    if a.no_save:
        print(json.dumps(report, indent=2))
    else:
        merge_results(a.section, report)


if __name__ == "__main__":
    main()
