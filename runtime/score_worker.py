"""Score token ids through one runtime of a bundle, in a process of its own: the int8 check on
other CPUs (export/arch_check.py) runs it under qemu on a pinned CPU model, in an interpreter
that may have nothing but the runtime and numpy (no torch; a folder holding `palkit` on
PYTHONPATH).

    python -m palkit.runtime.score_worker BUNDLE RUNTIME INPUTS.jsonl   # prints a JSON list of rows

Each input line: {"task", "input_ids", "token_type_ids"}, one unpadded sequence (mask all ones),
as the app's HostHarness `score` takes them. The caller checked the bundle's signature; this
process checks every file's size and SHA-256 as it loads it (runtime/engine.py).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from palkit.runtime.bundle import read_bundle
from palkit.runtime.engine import Engine


def score(bundle: Path, runtime: str, inputs: Path) -> list[list[float]]:
    engine = Engine(read_bundle(bundle, runtime=runtime), runtime, threads=1)
    rows = []
    for line in inputs.read_text().splitlines():
        x = json.loads(line)
        ids = np.array([x["input_ids"]], dtype=np.int64)
        types = np.array([x["token_type_ids"]], dtype=np.int64)
        out, _, _ = engine.run_ids(x["task"], ids, np.ones_like(ids), types)
        rows.append(out.tolist())
    return rows


if __name__ == "__main__":
    bundle, runtime, inputs = sys.argv[1:]
    json.dump(score(Path(bundle), runtime, Path(inputs)), sys.stdout)
