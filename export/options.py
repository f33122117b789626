"""What `palkit export` builds: its options, each default defined once here (the command's flags
read their defaults from this dataclass; tests/test_cli.py holds them to it). Light: the command
line reads it without importing torch."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from palkit.export.gate import Gate

TARGETS = ("android", "executorch", "onnx")  # android: both runtimes' files
QUANTS = ("int8", "fp32")


@dataclass(frozen=True)
class ExportOptions:
    """One field per flag of `palkit export`."""
    target: str = "android"              # android (both runtimes), executorch, onnx
    quant: str = "int8"                  # int8 or fp32
    tasks: list[str] | None = None       # None: every task of the run
    max_len: int | None = None           # None: 128, or the trunk's position table if shorter
    onnx: bool = True                    # with target android: also the ONNX Runtime files
    data_dir: Path | None = None         # dev data for verification; None: built-in sentences
    gate: Gate = Gate()                  # the int8 check (export/gate.py)
    all_tasks: bool = True               # several tasks: the all-tasks program and graph
    overwrite: bool = False              # replace an existing bundle at `out`
    sign_key: Path | None = None         # sign each bundle (model.sig) before publishing it
