"""`palkit bench --scale 1,3,10,30`: what an ExecuTorch bundle costs as its number of tasks grows.

For each T, a bundle of T synthetic tasks (`add_synthetic_tasks`) on the run's trunk is exported
and timed, then measured by bench/worker.py processes as `palkit bench` measures bundles.
"""
from __future__ import annotations

import copy
import dataclasses
import resource
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

from palkit.bench.machine import host_machine
from palkit.bench.options import LatencyBudget
from palkit.bench.run import command_line, latency_spec, run_worker
from palkit.bench.schema import ALL_TASKS, percentile
from palkit.core.errors import PalkitError
from palkit.core.fileio import remove_tree, write_json, write_text
from palkit.trainer.checkpoint import resolve_model_dir
from palkit.ui.progress import say

SCHEMA = "palkit-bench-scale"
VERSION = 2
SYNTHETIC_NOISE = 0.05  # relative to each tensor's std: tasks differ, shapes and scales stay real
QUANTITIES = {  # key: (label, unit)
    "export_s": ("export (ExecuTorch files)", "s"),
    "add_task_s": ("add a task to the bundle", "s"),
    "bundle_bytes": ("ExecuTorch files", "bytes"),
    "memory_all_ready_bytes": ("resident, all T tasks ready", "bytes"),
    "swap_p50_ms": ("swap p50 (Python)", "ms"),
    "one_task_p50_ms": ("one task p50", "ms"),
    "all_tasks_p50_ms": ("all tasks p50", "ms"),
}


class ScaleError(PalkitError, RuntimeError):
    """The scale benchmark cannot run as asked (a measurement failed)."""


@dataclass(frozen=True)
class ScaleOptions:
    """What `palkit bench --scale` measures; one field per flag."""
    tasks: list[int]                 # the T of the bundles
    threads: int = 1
    seq_len: int = 128
    timing: LatencyBudget = LatencyBudget(3, 20, 0.5, 4.0, 4)
    seed: int = 0
    int8: bool = True
    work: Path = Path("reports/.bench-work/scale")
    timeout_s: float = 3600


# ---- exporting ---------------------------------------------------------------------------------

def add_synthetic_tasks(model: nn.Module, count: int, seed: int = 0) -> list[str]:
    """Give `model` `count` synthetic tasks, syn01, syn02, ... in place of its own, and return
    their names: task i is a copy of task i mod n with seeded noise on every weight, so every
    task's file differs; their outputs mean nothing (for time, bytes and memory only)."""
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


def export_timed(model_dir: Path, tasks: int, opts: ScaleOptions) -> dict[str, Any]:
    """Export a bundle of `tasks` synthetic tasks (timed: lowering and task files), make it
    loadable (vocabulary and manifest, not timed), and time adding one more task to a copy."""
    from palkit.core.fileio import write_vocab
    from palkit.export.bundle import build_manifest, calibration_inputs, write_executorch
    from palkit.runtime.manifest import write_manifest
    from palkit.trainer.checkpoint import load_model

    out = opts.work / f"T{tasks}"
    remove_tree(out)
    model, tokenizer, trunk_sha = load_model(model_dir)
    names = add_synthetic_tasks(model, tasks + 1, opts.seed)
    exported, added = names[:tasks], names[tasks]
    calib = calibration_inputs(model, opts.seq_len, tokenizer)
    out.mkdir(parents=True)
    t0, c0 = time.perf_counter(), cpu_seconds()
    details = write_executorch(model, exported, out, opts.int8, opts.seq_len, calib, True, say)
    result: dict[str, Any] = {"export_s": time.perf_counter() - t0,
                              "export_cpu_s": cpu_seconds() - c0, "tasks": exported,
                              "bundle": str(out)}
    files = out / "executorch"
    result["files"] = {p.relative_to(files).as_posix(): p.stat().st_size
                       for p in sorted(files.rglob("*")) if p.is_file()}
    write_vocab(tokenizer, out / "vocab.txt")
    details["float_layers"] = []
    write_manifest(out, build_manifest(out, model, model_dir, trunk_sha, tokenizer, opts.seq_len,
                                       opts.int8, {"executorch": details}, exported))
    copy_dir = out.with_name(out.name + "-add-task")  # the measured bundle keeps its T tasks
    remove_tree(copy_dir)
    shutil.copytree(out, copy_dir)
    result["add_task"] = add_task_timed(model, tokenizer, added, copy_dir)
    remove_tree(copy_dir)
    return result


def add_task_timed(model, tokenizer, task: str, bundle: Path) -> dict[str, Any]:
    """`palkit export RUN --adapter TASK --out BUNDLE`'s steps (publish_task) for a task of the
    in-memory model, verified on the built-in sentences; reading the run is not timed."""
    from palkit.export.bundle import publish_task
    from palkit.export.gate import Gate
    from palkit.runtime.bundle import read_bundle

    t0 = time.perf_counter()
    old = read_bundle(bundle).manifest
    report = publish_task(model, tokenizer, task, bundle, old, old.trunk.sha256, None, Gate(),
                          lambda _: None)
    return {"total_s": time.perf_counter() - t0, "task": task,
            "verify_passed": bool(report["passed"])}


# ---- measuring ---------------------------------------------------------------------------------

def worker(spec: dict[str, Any], opts: ScaleOptions) -> dict[str, Any]:
    result = run_worker({"threads": opts.threads, "seq_len": opts.seq_len, **spec}, opts.timeout_s)
    if "error" in result:
        raise ScaleError(f"{spec['subject']['name']} ({spec['mode']}): {result['error']}")
    return result


def measure(export: dict[str, Any], vocab_size: int, opts: ScaleOptions) -> dict[str, Any]:
    """Every quantity of one exported bundle, each process fresh."""
    folder, names = str(export["bundle"]), export["tasks"]
    every = {"format": "bundle", "bundle": folder, "task": ALL_TASKS}
    subj = {"name": f"T{len(names)}", "runtime": "executorch", "vocab_size": vocab_size,
            "tasks": {n: {"format": "bundle", "bundle": folder, "task": n} for n in names},
            "all_tasks": every if len(names) > 1 else None}  # bench/worker.py's subject
    load = worker({"mode": "load", "subject": subj}, opts)
    configs = [f"task:{names[0]}"] + (["all_tasks"] if len(names) > 1 else [])
    lat = worker(latency_spec(subj, configs, opts.timing), opts)["rows"]
    p50 = {r["config"]: r.get("p50_ms") for r in lat}
    swaps = list(load["swap_ms"].values())
    files = export["files"]
    task_files = [b for rel, b in files.items() if rel.startswith("syn")]
    point: dict[str, Any] = {
        "tasks": len(names),
        "export_s": export["export_s"], "export_cpu_s": export["export_cpu_s"],
        "add_task_s": export["add_task"]["total_s"],
        "bundle_bytes": sum(files.values()),
        "memory_all_ready_bytes": load["rss_all_tasks"] - load["rss_after_import"],
        "memory_one_task_bytes": load["rss_one_task"] - load["rss_after_import"],
        "swap_p50_ms": percentile(swaps, 50) if swaps else None,
        "one_task_p50_ms": p50.get(configs[0]),
        "all_tasks_p50_ms": p50.get(configs[-1]),  # T=1: its one task
        "task_file_bytes": statistics.fmean(task_files) if task_files else None,
        "task_tensor_bytes": task_tensor_bytes(Path(export["bundle"]), names),
        "detail": {"files": files, "load_ms": load["load_ms"], "swap_ms": load["swap_ms"],
                   "first_run_after_swap_ms": load["first_run_after_swap_ms"], "latency": lat,
                   "add_task": export["add_task"], "load_avg_1min": load["load_avg_1min"]},
    }
    if len(names) > 1:
        prog = worker({"mode": "load_program", "subject": subj}, opts)
        point["memory_all_tasks_method_bytes"] = prog["rss"] - prog["rss_after_import"]
    return point


def task_tensor_bytes(folder: Path, names: list[str]) -> float:
    """What one task's tensors take in memory once the runtime has read its file (an int8
    bundle's matrices dequantized to fp32: about 4x their bytes in the file), mean over tasks."""
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.runners import read_task_weights

    bundle = load_bundle(folder, runtime="executorch")
    return statistics.fmean(
        sum(t.nbytes for t in read_task_weights(bundle.path(bundle.tasks[n].files["executorch"]),
                                                bundle.manifest.executorch_method(n)[1]))
        for n in names)


def scale(run: Path, out: Path, opts: ScaleOptions) -> dict[str, Any]:
    """Export, measure and write out (.json), its .md and .png; returns the data."""
    model_dir = resolve_model_dir(run)
    opts.work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    machine = host_machine()
    points = []
    for t in sorted(opts.tasks):
        say(f"scale: exporting {t} task(s)")
        export = export_timed(model_dir, t, opts)
        vocab_size = sum(1 for _ in open(Path(export["bundle"]) / "vocab.txt", encoding="utf-8"))
        say(f"scale: measuring {t} task(s) (exported in {export['export_s']:.0f} s)")
        points.append(measure(export, vocab_size, opts))
    data = {
        "schema": SCHEMA, "version": VERSION, "command": command_line() or sys.argv,
        "machine": machine, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.time() - started,
        "settings": {**asdict(opts), "work": str(opts.work), "run": str(run)},
        "synthetic_tasks": "each task a copy of one of the run's tasks with seeded noise on its "
                           "adapter and head weights (bench/scale.py): real shapes, real trunk, "
                           "meaningless outputs; for time, bytes and memory only",
        "quantities": {k: {"label": label, "unit": unit} for k, (label, unit) in QUANTITIES.items()},
        "points": points,
    }
    data["targets"] = targets(data)
    write_json(out, data)
    write_text(out.with_suffix(".md"), markdown(data))
    chart(data, out.with_suffix(".png"))
    return data


def targets(data: dict[str, Any]) -> dict[str, Any]:
    """The targets these figures decide (None where a T is missing)."""
    p2 = {p["tasks"]: p for p in data["points"]}
    out: dict[str, Any] = {}
    for t, p in p2.items():
        if t > 1 and 1 in p2:
            bound = p2[1]["memory_one_task_bytes"] + (t - 1) * p["task_tensor_bytes"]
            out[f"memory_all_ready_T{t}_over_one_plus_task_tensors"] = \
                p["memory_all_ready_bytes"] / bound
    if 3 in p2 and 30 in p2:
        out["export_T30_over_T3"] = p2[30]["export_s"] / p2[3]["export_s"]
    out["export_T3_s"] = p2.get(3, {}).get("export_s")
    out["add_task_s_max"] = max((p["add_task_s"] for p in p2.values() if p["add_task_s"]),
                                default=None)
    out["swap_p50_ms_max"] = max((p["swap_p50_ms"] for p in p2.values() if p["swap_p50_ms"]),
                                 default=None)
    return out


# ---- writing -----------------------------------------------------------------------------------

def fmt_value(key: str, v: float | None) -> str:
    if v is None:
        return "—"
    if key.endswith("_bytes"):
        return f"{v / 2**20:.1f} MiB"
    if key.endswith("_s"):
        return f"{v:.0f} s" if v >= 10 else f"{v:.2f} s"
    return f"{v:.3f} ms" if v < 1 else f"{v:.1f} ms"


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [
        "# Tasks as data at scale: ExecuTorch bundles of T tasks", "",
        f"Machine: {m['model']}, {m['affinity']} cores usable, "
        f"{'avx512_vnni' if 'avx512_vnni' in (m.get('cpu_flags') or []) else 'no avx512_vnni'}"
        f"; {data['date']}; {data['settings']['threads']} thread(s), "
        f"{data['settings']['seq_len']} tokens. Command: `{' '.join(data['command'])}`.", "",
        f"Tasks are synthetic: {data['synthetic_tasks']}.", "",
        "| T | " + " | ".join(f"{label} ({unit})" for label, unit in QUANTITIES.values()) + " |",
        "|---:|" + "---:|" * len(QUANTITIES)]
    for p in sorted(data["points"], key=lambda p: p["tasks"]):
        lines.append(f"| {p['tasks']} | "
                     + " | ".join(fmt_value(key, p.get(key)) for key in QUANTITIES) + " |")
    lines += ["", "Targets:", ""]
    lines += [f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}"
              for k, v in data["targets"].items()]
    lines += ["", "Export = lowering and task files (palkit export's ExecuTorch part, without "
              "verification); add-task = add_adapter's steps with the task's verification on the "
              "built-in sentences. Memory: resident bytes above the process after imports, every "
              "task loaded and run once; its target divides by T=1's plus T-1 tasks' tensors as "
              "the runtime holds them (fp32: an int8 file's matrices are dequantized when read)."]
    return "\n".join(lines) + "\n"


def chart(data: dict[str, Any], path: Path) -> None:
    from palkit.ui.plots import pyplot, save

    plt = pyplot()
    from matplotlib import ticker
    fig, axes = plt.subplots(2, 4, figsize=(20, 9.5))
    scale_of = {"bytes": (2**20, "MiB"), "s": (1, "s"), "ms": (1, "ms")}
    ts = sorted(p["tasks"] for p in data["points"])
    for ax, (key, (label, unit)) in zip(axes.flat, QUANTITIES.items()):
        div, shown = scale_of[unit]
        pts = sorted((p for p in data["points"] if p.get(key) is not None),
                     key=lambda p: p["tasks"])
        ax.plot([p["tasks"] for p in pts], [p[key] / div for p in pts], "o-", color="#1f77b4",
                markersize=8)
        ax.set_title(label)
        ax.set_xscale("log")
        values = [p[key] for p in pts if p[key]]
        if values and max(values) > 10 * min(values):  # else a log axis shows no labels
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xticks(ts)
        ax.set_xticklabels([str(t) for t in ts])
        ax.set_xlabel("tasks in the bundle (T)")
        ax.set_ylabel(shown)
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        # on a log axis, label 2x and 5x too: most panels span one or two decades
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[-1].axis("off")
    m = data["machine"]
    fig.suptitle(f"ExecuTorch bundles with T synthetic tasks (int8, "
                 f"{data['settings']['seq_len']} tokens, {data['settings']['threads']} thread); "
                 f"{m['model']}, {data['date'][:10]}", fontsize=15)
    fig.tight_layout()
    save(fig, path)
