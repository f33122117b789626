"""Export one synthetic T-task ExecuTorch bundle, timed: `python bench/scale_export.py SRC SPEC OUT`.

bench/scale.py runs this in a fresh process per bundle with SRC, a palkit source tree, first on
sys.path: the working tree for today's format (one trunk, every task a weights file), or
palkit's own history for the per-task-program format it replaced (format 1: one lowered program
per task plus an all-tasks program; see bench/scale.py). So this file imports palkit only inside
`main`, and only what both trees have: the model loader and export/bundle.py's
`write_executorch`, which is each format's whole ExecuTorch export (lowering and task files).

SPEC: {"format": 1 | 2, "model_dir": DIR, "tasks": T, "seed": N, "max_len": N, "int8": bool,
"out": DIR, "add_task": bool}. OUT gets the export's wall and CPU seconds (this process and the
lowering processes it started) and, for format 2 with "add_task", the time to add one more task
to the finished bundle.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

SYNTHETIC_NOISE = 0.05  # relative to each tensor's std: tasks differ, shapes and scales stay real


def add_synthetic_tasks(model: nn.Module, count: int, seed: int = 0) -> list[str]:
    """Give `model` `count` synthetic tasks, syn01, syn02, ... in place of its own: task i is a
    copy of the model's task i mod n (its kind, outputs, adapter and head shapes) with seeded
    noise on every weight, so every task's file is different. Their outputs mean nothing: they
    measure time, bytes and memory only. Returns the names."""
    templates = list(model.tasks)
    generator = torch.Generator().manual_seed(seed)
    adapters, heads, tasks = {}, {}, {}
    for i in range(count):
        src, name = templates[i % len(templates)], f"syn{i + 1:02d}"
        tasks[name] = dataclasses.replace(model.tasks[src], name=name)
        owned = {"head": (heads, model.heads[src])}
        if src in model.adapters:
            owned["adapter"] = (adapters, model.adapters[src])
        for table, module in owned.values():
            clone = copy.deepcopy(module)
            with torch.no_grad():
                for p in clone.parameters():
                    noise = torch.randn(p.shape, generator=generator)
                    p.add_(noise * SYNTHETIC_NOISE * float(p.std() if p.numel() > 1 else 1.0))
            table[name] = clone
    model.adapters, model.heads, model.tasks = nn.ModuleDict(adapters), nn.ModuleDict(heads), tasks
    return list(tasks)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the lowering workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def folder_bytes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file()}


def main(spec: dict[str, Any]) -> dict[str, Any]:
    from export.bundle import calibration_inputs, write_executorch
    from trainer.checkpoint import load_model

    model_dir, out = Path(spec["model_dir"]), Path(spec["out"])
    model, tokenizer, trunk_sha = load_model(model_dir)
    count, extra = spec["tasks"], 1 if spec.get("add_task") else 0
    names = add_synthetic_tasks(model, count + extra, spec["seed"])
    exported, added = names[:count], names[count:]
    calib = calibration_inputs(model, spec["max_len"], tokenizer)
    out.mkdir(parents=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    details = write_executorch(model, exported, out, spec["int8"], spec["max_len"], calib, True,
                               lambda line: print(line, file=sys.stderr, flush=True))
    result: dict[str, Any] = {"export_s": time.perf_counter() - t0, "export_cpu_s": cpu_seconds() - c0,
                              "tasks": exported, "files": folder_bytes(out / "executorch")}
    if spec["format"] == 2:
        make_loadable(model, model_dir, trunk_sha, tokenizer, spec, exported, details, out)
        if added:  # on a copy: the bundle measured afterwards keeps its T tasks
            copy_dir = out.with_name(out.name + "-add-task")
            shutil.rmtree(copy_dir, ignore_errors=True)
            shutil.copytree(out, copy_dir)
            result["add_task"] = add_task(model, tokenizer, added[0], copy_dir, spec)
            shutil.rmtree(copy_dir)
    return result


def make_loadable(model, model_dir: Path, trunk_sha: str, tokenizer, spec: dict[str, Any],
                  names: list[str], details: dict[str, Any], out: Path) -> None:
    """The vocabulary and manifest that make `out` a bundle palkit's runtime layer loads (not
    timed: export writes them whatever the format)."""
    from export.bundle import build_manifest
    from export.manifest import write_manifest
    from trainer.fileio import write_vocab

    write_vocab(tokenizer, out / "vocab.txt")
    details["float_layers"] = []
    write_manifest(out, build_manifest(out, model, model_dir, trunk_sha, tokenizer,
                                       spec["max_len"], spec["int8"], {"executorch": details},
                                       names))


def add_task(model, tokenizer, task: str, bundle: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """`palkit export RUN --adapter TASK --out BUNDLE`'s steps (export/bundle.py add_adapter)
    for a task of the in-memory model: write its weights file and a new manifest into a staged
    copy (hard links), verify the task on the built-in sentences, swap it in. Reading the run
    from disk is not timed."""
    from export.bundle import stage_task
    from export.runtime import load_bundle
    from export.verify import Gate, verify_bundle
    from trainer.fileio import remove_tree, replace_dir, staging_dir

    t0 = time.perf_counter()
    old = load_bundle(bundle).manifest
    build = staging_dir(bundle)
    stage_task(model, tokenizer, task, bundle, old, old.trunk.sha256, build, lambda _: None)
    written = time.perf_counter() - t0
    report = verify_bundle(build, model, tokenizer, spec["max_len"], None, spec["int8"], Gate(),
                           [task], log=lambda _: None)
    remove_tree(build / ".new")
    replace_dir(build, bundle)
    return {"total_s": time.perf_counter() - t0, "files_and_manifest_s": written,
            "verify_s": time.perf_counter() - t0 - written, "task": task,
            "verify_passed": bool(report["passed"])}


if __name__ == "__main__":
    source, spec_path, out_path = sys.argv[1:]
    sys.path[0] = source  # the palkit tree to export with, in place of this file's folder
    Path(out_path).write_text(json.dumps(main(json.loads(Path(spec_path).read_text())), indent=1))
