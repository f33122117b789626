"""Tasks added later to a shipped shared trunk, by leaving each task out: results/later-tasks.*

    python -m lab.later_tasks --work DIR [--data-dir DIR] [--seed 0] [--separate RUN]

Every number comes from palkit's own commands, run in child processes (the log beside each run
folder holds them), all at one budget: the quick preset with --length-buckets 64.

1. `joint`: the shared model (heads only) trained on SST-5, Quora and STS-B from the start.
2. For each of those tasks L, `without-L`: the shared model on the other two; then L added to a
   copy of it with `palkit add-task` three ways: a head only, PALs in the top layer, PALs in
   every layer.
3. CFIMDB added to a copy of `joint` the same three ways, and CFIMDB trained alone (`--mode
   separate`) as its separate model.
4. `separate`: the three launch tasks' separate models (`--separate RUN` reuses a finished
   `--mode separate` run of the same budget instead of training one).

Each added task is scored on dev as its add-task run (RUN/added/<task>) holds it: the frozen
trunk and the new adapter. A run that finished is not trained again and a score on disk is not
recomputed, so an interrupted study continues with the same command.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from palkit.core.fileio import write_json, write_text
from palkit.core.host import machine_name
from palkit.core.options import resolve_data_dir
from palkit.trainer.checkpoint import TRUNK_WEIGHTS, read_training_state, separate_models
from palkit.trainer.tasks import BUILTIN_TASKS

CLI = str(Path(__file__).resolve().parents[1] / "cli.py")
LAUNCH_TASKS = ("sst", "quora", "sts")
# Quora, whose dev split is the largest, is left out last, then CFIMDB is added.
LEAVE_OUT_ORDER = ("sst", "sts", "quora")
LATER_TASK = "cfimdb"
BUDGET = ["--preset", "quick", "--length-buckets", "64"]
# How a later task is added: add-task's options for each of the three ways compared.
ADAPTERS: dict[str, list[str]] = {
    "head": ["--adapter", "head"],
    "pal-top-1": ["--adapter", "pal", "--pal-layers", "top-1"],
    "pal-all": ["--adapter", "pal", "--pal-layers", "all"],
}


def palkit(args: list[str], log: Path) -> None:
    """One palkit command in a child process, appended to `log`; a failure stops the study."""
    with open(log, "a") as f:
        f.write(f"$ palkit {shlex.join(args)}\n")
        f.flush()
        t0 = time.time()
        code = subprocess.call([sys.executable, CLI, *args], stdout=f, stderr=subprocess.STDOUT,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
        f.write(f"# exit {code} after {time.time() - t0:.0f} s\n")
    if code:
        sys.exit(f"study: `palkit {shlex.join(args)}` exited {code}; see {log}")


def parts(run: Path) -> list[Path]:
    """The folders that hold `run`'s checkpoints: one per task for a separate run."""
    return separate_models(run) or [run]


def finished(run: Path) -> bool:
    return all((p / "last").exists() and read_training_state(p).finished for p in parts(run))


def train(run: Path, tasks: tuple[str, ...], mode: str, seed: int, data_dir: str) -> Path:
    if not finished(run):
        resume = ["--resume"] if any((p / "last").exists() for p in parts(run)) else []
        palkit(["train", "--mode", mode, "--tasks", ",".join(tasks), "--seed", str(seed),
                "--data-dir", data_dir, *BUDGET, "--out", str(run), *resume],
               run.with_suffix(".log"))
    return run


def add_later(base: Path, task: str, adapter: str, data_dir: str) -> Path:
    """`task` added to a copy of `base` (hard links: add-task never rewrites the trunk file)."""
    run = base.with_name(f"{base.name}+{task}-{adapter}")
    added = run / "added" / task
    if (run / "model" / "tasks" / task).is_dir():
        return added
    if not run.exists():
        shutil.copytree(base, run, copy_function=os.link)
    if added.exists() and not (added / "last").exists():  # stopped before its first checkpoint
        shutil.rmtree(added)
    resume = ["--resume"] if (added / "last").exists() else []
    palkit(["add-task", str(run), "--task", task, "--data-dir", data_dir, *ADAPTERS[adapter],
            *resume], run.with_suffix(".log"))
    return added


def dev_scores(run: Path, data_dir: str) -> dict[str, Any]:
    out = run / "dev.json"
    if not out.is_file():
        palkit(["evaluate", str(run), "--split", "dev", "--data-dir", data_dir, "--out", str(out)],
               run.with_name(run.name + ".evaluate.log"))
    return json.loads(out.read_text())


def points(task: str, scores: dict[str, Any]) -> float:
    """The task's own metric in points: accuracy, or Pearson for STS-B."""
    spec = BUILTIN_TASKS[task]
    key = f"{task}_pearson" if spec.is_regression else f"{task}_acc"
    return round(100 * scores[key], 2)


def task_bytes(model_dir: Path, task: str) -> int:
    return (model_dir / "tasks" / task / "adapter.safetensors").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the runs")
    parser.add_argument("--data-dir", help="the task data (default: as `palkit train`'s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--separate", type=Path, help="a finished --mode separate run to reuse")
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--leave-out", default=",".join(LEAVE_OUT_ORDER),
                        help="launch tasks to leave out, in this order (empty: none); a second "
                             "study process on the same --work can take some of the work")
    a = parser.parse_args()
    a.data_dir = str(resolve_data_dir(a.data_dir))
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    joint = train(work / "joint", LAUNCH_TASKS, "shared", a.seed, a.data_dir)
    separate = a.separate or train(work / "separate", LAUNCH_TASKS, "separate", a.seed, a.data_dir)
    joint_dev, separate_dev = dev_scores(joint, a.data_dir), dev_scores(separate, a.data_dir)
    reference = {t: {"joint": points(t, joint_dev), "separate": points(t, separate_dev)}
                 for t in LAUNCH_TASKS}
    trunk_bytes = (joint / "model" / "trunk" / TRUNK_WEIGHTS).stat().st_size
    record = {"what": "tasks added later to a frozen shared trunk, each launch task left out in "
                      "turn, plus CFIMDB added to the three-task shared model",
              "budget": "quick preset (4 x 100 steps, batch 32, max length 64), "
                        "--length-buckets 64; add-task at its defaults (lr 1e-3)",
              "seed": a.seed, "machine": machine_name(), "date": time.strftime("%Y-%m-%d"),
              "command": "python -m lab.later_tasks " + shlex.join(sys.argv[1:]),
              "trunk_bytes": trunk_bytes, "rows": []}

    def add_row(task: str, base: Path, adapter: str) -> None:
        """Add `task` to `base` one way, score it, and rewrite the results with the row."""
        added = add_later(base, task, adapter, a.data_dir)
        dev, ref = points(task, dev_scores(added, a.data_dir)), reference[task]
        adapter_bytes = task_bytes(added / "model", task)
        record["rows"].append({
            "task": task, "base": base.name, "adapter": adapter, "dev": dev,
            "joint": ref["joint"], "separate": ref["separate"],
            "vs_joint": None if ref["joint"] is None else round(dev - ref["joint"], 2),
            "vs_separate": round(dev - ref["separate"], 2), "adapter_bytes": adapter_bytes,
            "adapter_share_of_trunk": round(adapter_bytes / trunk_bytes, 4)})
        a.results.mkdir(parents=True, exist_ok=True)
        write_json(a.results / "later-tasks.json", record)
        write_text(a.results / "later-tasks.md", markdown(record))

    for task in filter(None, a.leave_out.split(",")):
        others = tuple(t for t in LAUNCH_TASKS if t != task)
        base = train(work / f"without-{task}", others, "shared", a.seed, a.data_dir)
        for adapter in ADAPTERS:
            add_row(task, base, adapter)
    cfimdb_separate = train(work / "separate-cfimdb", (LATER_TASK,), "separate", a.seed,
                            a.data_dir)
    reference[LATER_TASK] = {"joint": None,
                             "separate": points(LATER_TASK, dev_scores(cfimdb_separate, a.data_dir))}
    for adapter in ADAPTERS:
        add_row(LATER_TASK, joint, adapter)
    print(markdown(record))


def markdown(record: dict[str, Any]) -> str:
    lines = [f"# Tasks added later to a frozen shared trunk ({record['date']})", "",
             f"{record['what']}. Budget: {record['budget']}; seed {record['seed']}. "
             f"Machine: {record['machine']}. Command: `{record['command']}`.", "",
             "Dev metric in points (accuracy; Pearson for STS-B). *joint*: the task in the "
             "three-task shared model from the start; *separate*: its own fine-tuned model; "
             "bytes: the new task's fp32 adapter file against the fp32 trunk file.", "",
             "| task | added as | dev | vs joint | vs separate | adapter bytes | of trunk |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in record["rows"]:
        vs_joint = "–" if r["vs_joint"] is None else f"{r['vs_joint']:+.2f}"
        lines.append(f"| {r['task']} | {r['adapter']} | {r['dev']:.2f} | {vs_joint} | "
                     f"{r['vs_separate']:+.2f} | {r['adapter_bytes']:,} | "
                     f"{100 * r['adapter_share_of_trunk']:.2f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
