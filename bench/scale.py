"""`palkit bench --scale 1,3,10,30`: what ExecuTorch bundles cost as the number of tasks grows.

For each T, a bundle of T synthetic tasks (bench/scale_export.py: copies of the run's tasks with
seeded noise on their weights; the run's trunk, int8) is exported in a fresh process, timed,
and then measured by bench/worker.py processes as `palkit bench` measures bundles: export time,
add-task time, the ExecuTorch files' bytes, resident memory with all T tasks ready, swap p50,
one-task p50 and all-tasks p50.

Two formats, side by side in one run:
* format 2 (today): one trunk's programs (`trunk.pte`: `forward`; `all_tasks.pte`:
  `forward_all`) over one `trunk.ptd`, every task a weights file;
* format 1 (per-task programs, dropped in bundle format 2): one lowered program per task plus
  an all-tasks program, exported by palkit's own code at FORMAT1_COMMIT, read from this
  checkout's git history (`git archive`), and run by the same worker as today's bundles (each
  task program loaded against the shared trunk.ptd, as that runtime did).
Format 1 is measured at the T of --scale-format1 (it lowers the whole trunk once per task).
Its task programs are lowered independently, so beyond the largest measured T its figures are
extrapolated, and marked so per quantity: export and bytes add one task program per task (the
all-tasks program kept at its largest measured size: a lower bound), memory adds what each
further task program added, swap and one-task latency stay, all-tasks latency grows with T.
"""
from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.machine import host_machine
from bench.run import ROOT, Timing, command_line, run_worker
from bench.schema import ALL_TASKS, percentile
from trainer.checkpoint import resolve_model_dir
from trainer.errors import PalkitError
from trainer.fileio import remove_tree, write_json, write_text
from ui.progress import say

SCHEMA = "palkit-bench-scale"
VERSION = 1
# main just before bundle format 2 merged: its export/bundle.py wrote one program per task
FORMAT1_COMMIT = "440bfdec215f1d4d36cbf4105072b9de4bae0158"
FORMAT1_TREE = ("trainer", "export", "quant", "ui")  # what its exporter imports
EXPORT_SCRIPT = Path(__file__).with_name("scale_export.py")
FORMATS = {1: "per-task programs (format 1)", 2: "one trunk + task files (format 2)"}
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
    """The scale benchmark cannot run as asked (no git history, an export failed)."""


@dataclass(frozen=True)
class ScaleOptions:
    """What `palkit bench --scale` measures; one field per flag."""
    tasks: list[int]                 # the T of format 2's bundles
    format1_tasks: list[int]         # the T at which format 1 is measured ([]: not at all)
    threads: int = 1
    seq_len: int = 128
    timing: Timing = Timing(3, 20, 0.5, 4.0, 4)
    seed: int = 0
    int8: bool = True
    work: Path = Path("reports/.bench-work/scale")
    timeout_s: float = 3600


# ---- exporting ---------------------------------------------------------------------------------

def format1_source(work: Path) -> Path:
    """The palkit tree of FORMAT1_COMMIT, extracted once under `work` from git history."""
    dest = work / f"format1-src-{FORMAT1_COMMIT[:12]}"
    if (dest / "export" / "bundle.py").is_file():
        return dest
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", FORMAT1_COMMIT, *FORMAT1_TREE],
                             capture_output=True)
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise ScaleError(f"{ROOT}: cannot read palkit {FORMAT1_COMMIT[:12]} from git history "
                         f"({why[0]}); run from a palkit git checkout, or --scale-format1 none")
    part = dest.with_name(dest.name + ".part")
    remove_tree(part)
    part.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(part, filter="data")
    os.replace(part, dest)
    return dest


def export_timed(fmt: int, tasks: int, model_dir: Path, opts: ScaleOptions,
                 source: Path) -> dict[str, Any]:
    """Export one synthetic bundle in a fresh process with the palkit tree `source`."""
    out = opts.work / f"format{fmt}-T{tasks}"
    remove_tree(out)
    spec = {"format": fmt, "model_dir": str(model_dir), "tasks": tasks, "seed": opts.seed,
            "max_len": opts.seq_len, "int8": opts.int8, "out": str(out), "add_task": fmt == 2}
    with tempfile.TemporaryDirectory(prefix="palkit-scale-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": str(source)}
        done = subprocess.run([sys.executable, str(EXPORT_SCRIPT), str(source), str(spec_path),
                               str(out_path)], env=env, capture_output=True, text=True,
                              timeout=opts.timeout_s)
        if done.returncode != 0 or not out_path.is_file():
            tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"]
            raise ScaleError(f"exporting {FORMATS[fmt]} with {tasks} tasks failed: {tail[0][:300]}")
        return {**json.loads(out_path.read_text()), "bundle": str(out)}


# ---- measuring ---------------------------------------------------------------------------------

def subject(fmt: int, export: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """bench/worker.py's subject for an exported bundle of either format."""
    folder, names = Path(export["bundle"]), export["tasks"]
    if fmt == 2:
        tasks = {n: {"format": "bundle", "bundle": str(folder), "task": n} for n in names}
        every = {"format": "bundle", "bundle": str(folder), "task": ALL_TASKS}
    else:
        et = folder / "executorch"
        data = str(et / "trunk.ptd")
        tasks = {n: {"format": "pte", "path": str(et / f"{n}.pte"), "data": data} for n in names}
        every = {"format": "pte", "path": str(et / "_all_tasks.pte"), "data": data}
    return {"name": f"format{fmt}-T{len(names)}", "runtime": "executorch",
            "vocab_size": vocab_size, "tasks": tasks, "all_tasks": every if len(names) > 1 else None}


def worker(spec: dict[str, Any], opts: ScaleOptions) -> dict[str, Any]:
    result = run_worker({"threads": opts.threads, "seq_len": opts.seq_len, **spec}, opts.timeout_s)
    if "error" in result:
        raise ScaleError(f"{spec['subject']['name']} ({spec['mode']}): {result['error']}")
    return result


def latency_spec(subj: dict[str, Any], configs: list[str], t: Timing) -> dict[str, Any]:
    return {"mode": "latency", "subject": subj, "configs": configs, "warmup": t.warmup,
            "runs": t.min_runs, "min_seconds": t.min_seconds, "max_seconds": t.max_seconds,
            "block": t.block}


def p50_of(rows: list[dict[str, Any]], config: str) -> float | None:
    return next((r.get("p50_ms") for r in rows if r["config"] == config), None)


def measure(fmt: int, export: dict[str, Any], vocab_size: int,
            opts: ScaleOptions) -> dict[str, Any]:
    """Every quantity of one exported bundle, each process fresh."""
    subj = subject(fmt, export, vocab_size)
    names = export["tasks"]
    load = worker({"mode": "load", "subject": subj}, opts)
    configs = [f"task:{names[0]}"] + (["all_tasks"] if len(names) > 1 else [])
    lat = worker(latency_spec(subj, configs, opts.timing), opts)["rows"]
    swaps = list(load["swap_ms"].values())
    files = export["files"]
    task_files = [b for rel, b in files.items() if rel.startswith("syn")]
    point: dict[str, Any] = {
        "format": fmt, "tasks": len(names), "extrapolated": [],
        "export_s": export["export_s"], "export_cpu_s": export["export_cpu_s"],
        "add_task_s": export["add_task"]["total_s"] if "add_task" in export else None,
        "bundle_bytes": sum(files.values()),
        "memory_all_ready_bytes": load["rss_all_tasks"] - load["rss_after_import"],
        "memory_one_task_bytes": load["rss_one_task"] - load["rss_after_import"],
        "swap_p50_ms": percentile(swaps, 50) if swaps else None,
        "one_task_p50_ms": p50_of(lat, configs[0]),
        "all_tasks_p50_ms": p50_of(lat, "all_tasks") if len(names) > 1 else p50_of(lat, configs[0]),
        "task_file_bytes": statistics.fmean(task_files) if task_files else None,
        "task_tensor_bytes": task_tensor_bytes(Path(export["bundle"]), names) if fmt == 2 else None,
        "detail": {"files": files, "load_ms": load["load_ms"], "swap_ms": load["swap_ms"],
                   "first_run_after_swap_ms": load["first_run_after_swap_ms"], "latency": lat,
                   "add_task": export.get("add_task"), "load_avg_1min": load["load_avg_1min"]},
    }
    if len(names) > 1:
        prog = worker({"mode": "load_program", "subject": subj}, opts)
        point["memory_all_tasks_method_bytes"] = prog["rss"] - prog["rss_after_import"]
    return point


def task_tensor_bytes(folder: Path, names: list[str]) -> float:
    """What one task's tensors take in memory once the runtime has read its file (an int8
    bundle's matrices dequantized to fp32: about 4x their bytes in the file), mean over tasks."""
    from export.engines import read_task_weights
    from export.runtime import load_bundle

    bundle = load_bundle(folder, runtime="executorch")
    return statistics.fmean(
        sum(t.nbytes for t in read_task_weights(bundle.path(bundle.tasks[n].files["executorch"]),
                                                bundle.manifest.executorch_method(n)[1]))
        for n in names)


def side_by_side(f1: dict[str, Any], f2: dict[str, Any], vocab_size: int,
                 opts: ScaleOptions) -> dict[str, Any]:
    """One task of each format timed call by call in one process (the ratio a slow spell of a
    shared machine cannot bias)."""
    s1, s2 = subject(1, f1, vocab_size), subject(2, f2, vocab_size)
    first = f1["tasks"][0]
    both = {"name": f"side-by-side-T{len(f1['tasks'])}", "runtime": "executorch",
            "vocab_size": vocab_size, "all_tasks": None,
            "tasks": {"format1": s1["tasks"][first], "format2": s2["tasks"][first]}}
    rows = worker(latency_spec(both, ["task:format1", "task:format2"], opts.timing), opts)["rows"]
    a, b = p50_of(rows, "task:format1"), p50_of(rows, "task:format2")
    return {"tasks": len(f1["tasks"]), "format1_p50_ms": a, "format2_p50_ms": b,
            "format2_over_format1": b / a if a and b else None, "rows": rows}


def extrapolate_format1(measured: dict[int, dict[str, Any]], tasks: int) -> dict[str, Any]:
    """Format 1 at `tasks` beyond its largest measured T (see the module's docstring)."""
    top = max(measured)
    m, one = measured[top], measured[min(measured)]
    extra = tasks - top
    per_program_memory = ((m["memory_all_ready_bytes"] - one["memory_all_ready_bytes"])
                          / (top - min(measured)) if top > min(measured)
                          else one["memory_all_ready_bytes"])
    point = {k: m[k] for k in ("swap_p50_ms", "one_task_p50_ms", "add_task_s", "task_file_bytes")}
    if point["swap_p50_ms"] is None:  # only T=1 measured: a swap is what loading its program took
        point["swap_p50_ms"] = one["detail"]["load_ms"]
    point.update(
        format=1, tasks=tasks, measured_from=top,
        export_s=m["export_s"] + extra * measured[1]["export_s"] if 1 in measured else None,
        export_cpu_s=m["export_cpu_s"] + extra * measured[1]["export_cpu_s"] if 1 in measured else None,
        bundle_bytes=m["bundle_bytes"] + extra * m["task_file_bytes"],
        memory_all_ready_bytes=None if per_program_memory is None
        else m["memory_all_ready_bytes"] + extra * per_program_memory,
        all_tasks_p50_ms=m["all_tasks_p50_ms"] * tasks / top,
        extrapolated=["export_s", "bundle_bytes", "memory_all_ready_bytes", "swap_p50_ms",
                      "one_task_p50_ms", "all_tasks_p50_ms", "add_task_s"],
        how={"export_s": f"T={top}'s export + one task program's lowering (T=1's export) per "
                         "further task; the all-tasks program at its T={top} cost (a lower bound)",
             "bundle_bytes": f"T={top}'s files + one task program's .pte per further task; the "
                             "all-tasks program at its T={top} size (a lower bound)",
             "memory_all_ready_bytes": "what each further task program added between the "
                                       "measured T (one measured T: what the first took), per "
                                       "further task",
             "swap_p50_ms": f"T={top}'s (a swap loads one task program, whatever T; with "
                            "only T=1 measured, the load of its one program)",
             "one_task_p50_ms": f"T={top}'s (the same program)",
             "all_tasks_p50_ms": f"T={top}'s x T/{top} (every layer runs per task)",
             "add_task_s": "T=1's export (adding a task lowers one task program)"})
    return point


def scale(run: Path, out: Path, opts: ScaleOptions) -> dict[str, Any]:
    """Export, measure and write out (.json), its .md and .png; returns the data."""
    model_dir = resolve_model_dir(run)
    if opts.format1_tasks and 1 not in opts.format1_tasks:
        raise ScaleError("--scale-format1 must include 1: one task program's lowering is what "
                         "format 1 pays per further task (and per added task)")
    opts.work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    machine = host_machine()
    points: dict[tuple[int, int], dict[str, Any]] = {}
    exports: dict[tuple[int, int], dict[str, Any]] = {}
    old = format1_source(opts.work) if opts.format1_tasks else None
    # by T, each format-1 bundle after format 2's: the small, compared bundles first
    plan = sorted([(2, t) for t in opts.tasks] + [(1, t) for t in opts.format1_tasks],
                  key=lambda job: (job[1], job[0] == 1))
    vocab_size = 0
    for fmt, t in plan:
        say(f"scale: exporting {FORMATS[fmt]}, {t} task(s)")
        exports[fmt, t] = export_timed(fmt, t, model_dir, opts, ROOT if fmt == 2 else old)
        if not vocab_size:
            vocab_size = sum(1 for _ in open(Path(exports[fmt, t]["bundle"]) / "vocab.txt",
                                             encoding="utf-8"))
        say(f"scale: measuring {FORMATS[fmt]}, {t} task(s) "
            f"(exported in {exports[fmt, t]['export_s']:.0f} s)")
        points[fmt, t] = measure(fmt, exports[fmt, t], vocab_size, opts)
    if old is not None:
        for t in opts.format1_tasks:
            points[1, t]["add_task_s"] = points[1, 1]["export_s"]
    pairs = [side_by_side(exports[1, t], exports[2, t], vocab_size, opts)
             for t in opts.format1_tasks if (2, t) in exports]
    measured1 = {t: points[1, t] for t in opts.format1_tasks}
    extrapolated = [extrapolate_format1(measured1, t) for t in opts.tasks
                    if measured1 and t > max(measured1)]
    data = {
        "schema": SCHEMA, "version": VERSION, "command": command_line() or sys.argv, "machine": machine,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.time() - started,
        "settings": {**asdict(opts), "work": str(opts.work), "run": str(run),
                     "format1_commit": FORMAT1_COMMIT},
        "synthetic_tasks": "each task a copy of one of the run's tasks with seeded noise on its "
                           "adapter and head weights (bench/scale_export.py): real shapes, "
                           "real trunk, meaningless outputs; for time, bytes and memory only",
        "formats": {str(k): v for k, v in FORMATS.items()},
        "quantities": {k: {"label": label, "unit": unit} for k, (label, unit) in QUANTITIES.items()},
        "points": sorted(points.values(), key=lambda p: (p["format"], p["tasks"])) + extrapolated,
        "side_by_side": pairs,
    }
    data["targets"] = targets(data)
    write_json(out, data)
    write_text(out.with_suffix(".md"), markdown(data))
    chart(data, out.with_suffix(".png"))
    return data


def targets(data: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets that these figures decide (format 2; None where a T is missing)."""
    p2 = {p["tasks"]: p for p in data["points"] if p["format"] == 2}
    out: dict[str, Any] = {}
    if 1 in p2:
        for t, p in p2.items():
            if t > 1:
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
        "# Tasks as data at scale: T tasks, both ExecuTorch bundle formats", "",
        f"Machine: {m['model']}, {m['affinity']} cores usable, "
        f"{'avx512_vnni' if 'avx512_vnni' in (m.get('cpu_flags') or []) else 'no avx512_vnni'}"
        f"; {data['date']}; {data['settings']['threads']} thread(s), "
        f"{data['settings']['seq_len']} tokens. Command: `{' '.join(data['command'])}`.", "",
        f"Tasks are synthetic: {data['synthetic_tasks']}.", "",
        "Format 1 (per-task programs) is exported by palkit "
        f"{data['settings']['format1_commit'][:12]} (from git history); cells marked * are "
        "extrapolated from its measured T (how: the JSON's `how`).", "",
        "| T | " + " | ".join(f"{label} ({unit}): format 1 / format 2"
                            for label, unit in QUANTITIES.values()) + " |",
        "|---:|" + "---:|" * len(QUANTITIES)]
    by = {(p["format"], p["tasks"]): p for p in data["points"]}
    for t in sorted({p["tasks"] for p in data["points"]}):
        cells = []
        for key in QUANTITIES:
            pair = []
            for fmt in (1, 2):
                p = by.get((fmt, t))
                v = fmt_value(key, p.get(key)) if p else "—"
                pair.append(v + ("*" if p and key in p["extrapolated"] else ""))
            cells.append(" / ".join(pair))
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    if data["side_by_side"]:
        lines += ["", "One task of each format, timed call by call in one process:", "",
                  "| T | format 1 p50 | format 2 p50 | format 2 / format 1 |", "|---:|---:|---:|---:|"]
        for s in data["side_by_side"]:
            lines.append(f"| {s['tasks']} | {fmt_value('ms', s['format1_p50_ms'])} | "
                         f"{fmt_value('ms', s['format2_p50_ms'])} | "
                         f"{s['format2_over_format1']:.3f} |")
    lines += ["", "Targets (format 2):", ""]
    lines += [f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}"
              for k, v in data["targets"].items()]
    lines += ["", "Export = lowering and task files (palkit export's ExecuTorch part, without "
              "verification); add-task = add_adapter's steps with the task's verification on the "
              "built-in sentences (format 1: lowering one task program). Memory: resident bytes "
              "above the process after imports, every task loaded and run once (format 1: T "
              "task programs loaded, as its runtime kept them); its target divides by T=1's "
              "plus T-1 tasks' tensors as the runtime holds them (fp32: an int8 file's "
              "matrices are dequantized when read)."]
    return "\n".join(lines) + "\n"


def chart(data: dict[str, Any], path: Path) -> None:
    from bench.charts import _plt, save

    plt = _plt()
    from matplotlib import ticker
    fig, axes = plt.subplots(2, 4, figsize=(20, 9.5))
    scale_of = {"bytes": (2**20, "MiB"), "s": (1, "s"), "ms": (1, "ms")}
    colors = {1: "#c0504d", 2: "#1f77b4"}
    for ax, (key, (label, unit)) in zip(axes.flat, QUANTITIES.items()):
        div, shown = scale_of[unit]
        for fmt in (1, 2):
            pts = sorted((p for p in data["points"] if p["format"] == fmt and p.get(key) is not None),
                         key=lambda p: p["tasks"])
            if not pts:
                continue
            xs, ys = [p["tasks"] for p in pts], [p[key] / div for p in pts]
            ax.plot(xs, ys, "-", color=colors[fmt], alpha=0.5)
            for p, x, y in zip(pts, xs, ys):
                guessed = key in p["extrapolated"]
                ax.plot([x], [y], "o", color=colors[fmt], markersize=8,
                        markerfacecolor="white" if guessed else colors[fmt])
        ax.set_title(label)
        ax.set_xscale("log")
        values = [p[key] for p in data["points"] if p.get(key)]
        if values and max(values) > 10 * min(values):  # else a log axis shows no labels
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xticks(sorted({p["tasks"] for p in data["points"]}))
        ax.set_xticklabels([str(t) for t in sorted({p["tasks"] for p in data["points"]})])
        ax.set_xlabel("tasks in the bundle (T)")
        ax.set_ylabel(shown)
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        # on a log axis, label 2x and 5x too: most panels span one or two decades
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
        ax.grid(True, which="both", alpha=0.3)
    legend = axes.flat[-1]
    legend.axis("off")
    for fmt in (1, 2):
        legend.plot([], [], "o-", color=colors[fmt], label=FORMATS[fmt])
    legend.plot([], [], "o", color="gray", markerfacecolor="white", label="extrapolated")
    legend.legend(loc="center", frameon=False)
    m = data["machine"]
    fig.suptitle(f"ExecuTorch bundles with T synthetic tasks (MiniLM trunk, int8, "
                 f"{data['settings']['seq_len']} tokens, {data['settings']['threads']} thread); "
                 f"{m['model']}, {data['date'][:10]}", fontsize=15)
    fig.tight_layout()
    save(fig, path)
