"""The Android app's own ExecuTorch path as a bench subject, measured on this host.

The app's JNI library and Java loading path (built by palkit.android_demo.host.native_host from the
app's sources) run in a child JVM and open the bundle as the app does; a swap is timed apart from
the run after it, on bench/worker.py's synthetic input. Host figures, never phone figures.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from palkit.android_demo.host import native_host
from palkit.bench.schema import swap_and_memory
from palkit.bench.worker import synthetic_input
from palkit.core.errors import PalkitError
from palkit.runtime.manifest import read_manifest

SUBJECT = "executorch C++, the app's native path"


class NativePathError(PalkitError, RuntimeError):
    """No compiler or JDK here, or the app's native path refused the bundle."""


def measure_native(bundle: str | Path, seq_len: int = 128, threads: int = 1, runs: int = 20,
                   warmup: int = 3, timeout_s: float = 600.0,
                   trust_key: Path | None = None) -> dict[str, Any]:
    """Latency (per task and all tasks in turn) and resident memory of the app's native path;
    with `trust_key`, the app's own check refuses a bundle that key has not signed."""
    reason = native_host.missing_toolchain()
    if reason:
        raise NativePathError(f"cannot measure {SUBJECT}: {reason}")
    build = native_host.build()  # a compiler error is a bug in the sources: it keeps its output
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    if "executorch" not in manifest.runtimes:
        raise NativePathError(f"{bundle}: no ExecuTorch programs; export it with --target "
                              "android or executorch")
    with open(bundle / manifest.tokenizer.vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    x = synthetic_input(seq_len, vocab_size)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as inputs:
        json.dump({k: x[k][0].tolist() for k in ("input_ids", "token_type_ids")}, inputs)
        inputs.flush()
        done = subprocess.run(build.command("bench", str(bundle), str(threads), inputs.name,
                                            str(warmup), str(runs), trust_key=trust_key),
                              capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise NativePathError(f"{bundle}: {SUBJECT} failed: {last}")
    return {"subject": SUBJECT, "runtime": "executorch-cpp", "figures": "host",
            "bundle": str(bundle), **json.loads(done.stdout)}


def native_subject_entry(pal_entry: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The bench file's subject entry for the native path of a PAL bundle's ExecuTorch files:
    the same bundle bytes, the JVM process's resident memory above the loaded runtime."""
    rss = result["rss_bytes"]
    return {**{k: pal_entry[k] for k in ("precision", "pal_layers", "num_layers", "tasks",
                                             "bundle")},
            "role": "native", "runtime": "executorch-cpp", "label": f"{Path(result['bundle']).name}"
            f" (executorch C++, the app's native path)", "all_tasks_program": False,
            "first_result_ms": {"executorch-cpp": result["first_load_and_run_ms"]},
            **swap_and_memory("executorch-cpp", result["swap_ms"], result["swap_and_run_ms"],
                              rss["runtime_loaded"], rss["one_task"], rss["all_tasks"])}
