"""Lowering a bundle's programs in parallel worker processes (export's speed-up) writes exactly the
bytes that lowering them one after the other in this process writes."""
from __future__ import annotations

from pathlib import Path

import pytest

from export.bundle import calibration_inputs
from export.executorch_export import ALL_TASKS_PROGRAM, lower_programs
from trainer.checkpoint import load_model, resolve_model_dir

PROGRAMS = {"sts": ["sts"], ALL_TASKS_PROGRAM: ["sst", "sts"]}


def lowered_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_parallel_lowering_is_byte_identical_to_serial(tiny_pal_run, tmp_path):
    model, tokenizer, _ = load_model(resolve_model_dir(tiny_pal_run), ["sst", "sts"])
    calib = calibration_inputs(model, 32, tokenizer)
    messages: list[str] = []
    serial = lower_programs(model, PROGRAMS, tmp_path / "serial", True, 32, calib, workers=1,
                            log=messages.append)
    parallel = lower_programs(model, PROGRAMS, tmp_path / "parallel", True, 32, calib,
                              workers=2, log=messages.append)
    assert serial == parallel  # the facts for the manifest, by program name
    assert list(parallel) == list(PROGRAMS)
    got, want = lowered_bytes(tmp_path / "parallel"), lowered_bytes(tmp_path / "serial")
    assert sorted(want) == sorted(f"{n}/{f}" for n in PROGRAMS for f in (f"{n}.pte", "trunk.ptd"))
    assert got.keys() == want.keys()
    assert [k for k in want if got[k] != want[k]] == []
    assert "executorch: lowering 2 programs in 2 processes" in messages
    assert want["sts/trunk.ptd"] == want[f"{ALL_TASKS_PROGRAM}/trunk.ptd"]


def test_one_task_program_refuses_other_tasks(tiny_pal_run, tmp_path):
    model, tokenizer, _ = load_model(resolve_model_dir(tiny_pal_run), ["sst", "sts"])
    with pytest.raises(ValueError, match="'sst' holds only its own task"):
        lower_programs(model, {"sst": ["sst", "sts"]}, tmp_path, False, 32,
                       calibration_inputs(model, 32, tokenizer), workers=1, log=print)
