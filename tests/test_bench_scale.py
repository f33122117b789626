"""`palkit bench --scale`: bundles exported and measured at T = 1, 2 on the tiny BERT (the JSON's
shape and that its figures are the bundles' own), and the synthetic tasks."""
from __future__ import annotations

import json

import pytest
import torch

from palkit.bench.options import LatencyBudget
from palkit.bench.scale import QUANTITIES, ScaleOptions, add_synthetic_tasks, scale
from palkit.trainer.checkpoint import load_model, resolve_model_dir
from testing_utils import HANG_GUARD_S


def test_synthetic_tasks_copy_the_runs_tasks_with_different_weights(tiny_pal_run):
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    kinds = [model.tasks[t].kind for t in model.tasks]
    names = add_synthetic_tasks(model, 5, seed=0)
    assert names == ["syn01", "syn02", "syn03", "syn04", "syn05"]
    assert [model.tasks[n].kind for n in names] == kinds + kinds[:2]
    assert list(model.heads) == names and list(model.adapters) == names
    a, b = (dict(model.adapters[n].named_parameters()) for n in ("syn01", "syn04"))
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    assert not all(torch.equal(a[k], b[k]) for k in a)  # same template, different noise
    again, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    add_synthetic_tasks(again, 2, seed=0)  # the first tasks do not depend on how many follow
    assert torch.equal(next(again.heads["syn02"].parameters()),
                       next(model.heads["syn02"].parameters()))


@pytest.mark.slow
def test_scale_measures_bundles_of_t_tasks(tiny_pal_run, tmp_path):
    out = tmp_path / "scale.json"
    opts = ScaleOptions(tasks=[2, 1], seq_len=16, timing=LatencyBudget(1, 3, 0.0, 0.5, 1),
                        work=tmp_path / "work", timeout_s=HANG_GUARD_S)
    scale(tiny_pal_run, out, opts)
    data = json.loads(out.read_text())
    assert data["schema"] == "palkit-bench-scale" and data["version"] == 2
    by = {p["tasks"]: p for p in data["points"]}
    assert [p["tasks"] for p in data["points"]] == [1, 2]
    for t, p in by.items():
        for q in QUANTITIES:
            if q != "swap_p50_ms" or t > 1:  # one task: nothing to swap to
                assert p[q] is not None and p[q] > 0, (t, q)
    # the files are the bundle's own: the one-task program, the all-tasks program, trunk data
    # and T task files
    files = by[2]["detail"]["files"]
    assert sorted(files) == ["all_tasks.pte", "syn01.safetensors", "syn02.safetensors",
                             "trunk.ptd", "trunk.pte"]
    assert by[2]["bundle_bytes"] == sum(files.values())
    added = by[2]["detail"]["add_task"]
    assert added["task"] == "syn03" and added["verify_passed"]
    assert by[2]["add_task_s"] == added["total_s"]
    assert not (tmp_path / "work" / "T2-add-task").exists()  # the measured bundle keeps T tasks
    assert data["targets"]["memory_all_ready_T2_over_one_plus_task_tensors"] > 0
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Tasks as data at scale") and "format 1" not in md
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
