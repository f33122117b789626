"""results/accuracy.json and its Markdown table: measured entries, each with the command behind it.

`palkit results RUN --name NAME` scores a finished run on dev and test and records one
entry per split; the Markdown table is regenerated from the JSON every time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from palkit.core.errors import ConfigError
from palkit.core.host import machine_name
from palkit.trainer.add_task import ADD_TASK_DEFAULTS
from palkit.trainer.checkpoint import (read_json, read_run_config, read_training_state,
                                       separate_models, write_json)
from palkit.trainer.config import TrainConfig
from palkit.ui.tables import points


def canonical_command(cfg: dict[str, Any], out: str) -> str:
    """The `palkit train` line that reproduces a run: every option that differs from defaults."""
    defaults = TrainConfig().to_dict()
    skip = {"out", "data_dir", "custom_tasks"}
    if Path(out).parent.name == "added":
        # An add-task run (RUN/added/<task>): quote the add-task command that made it, its
        # adapter spelled out whatever the launch run has.
        run = Path(out).parent.parent
        parts = ["palkit", "add-task", str(run), "--task", cfg["tasks"][0]]
        parts += (["--adapter", "head"] if cfg["mode"] == "shared" else
                  ["--adapter", "pal", "--pal-layers", cfg["pal_layers"]])
        skip |= {"tasks", "base_model", "freeze_trunk", "mode", "pal_size", "pal_heads",
                 "pal_layers", "pal_share_projections", "max_len", "seed"}
        return " ".join(parts + option_flags(cfg, {**defaults, **ADD_TASK_DEFAULTS}, skip))
    return " ".join(["palkit", "train", *option_flags(cfg, defaults, skip), "--out", out])


def option_flags(cfg: dict[str, Any], defaults: dict[str, Any], skip: set[str]) -> list[str]:
    parts = []
    for key, value in cfg.items():
        if key in skip or value == defaults.get(key):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else f"--no-{key.replace('_', '-')}")
        elif isinstance(value, list):
            parts += [flag, ",".join(map(str, value))]
        else:
            parts += [flag, str(value)]
    return parts


def total_steps(cfg: dict[str, Any]) -> int | dict[str, int]:
    """Optimizer steps a run's model was trained for: the joint epochs, plus one tuning phase per
    task with --tune-adapters-after. A separate run: each task's model, by task."""
    joint = cfg["epochs"] * cfg["steps_per_epoch"]
    if cfg["mode"] == "separate":
        return {task: joint for task in cfg["tasks"]}
    return joint + cfg.get("tune_adapters_after", 0) * cfg["steps_per_epoch"] * len(cfg["tasks"])


def run_facts(run: Path) -> dict[str, Any]:
    """Mode, sampling, parameter counts and wall time of a finished run (separate: all models)."""
    cfg = read_run_config(run)
    models = separate_models(run)
    if models:
        subs = [run_facts(m) for m in models]
        return {"mode": "separate", "sampling": None,
                "params_total": sum(s["params_total"] for s in subs),
                "params_task_specific": sum(s["params_total"] for s in subs),
                "wall_time_s": round(sum(s["wall_time_s"] for s in subs), 1), "config": cfg}
    state = read_training_state(run)
    if not state.finished:
        raise ConfigError(f"{run}: the run has not finished; resume it with "
                         f"`palkit train --resume --out {run}`")
    summary = read_json(run / "model" / "summary.json")
    return {"mode": cfg["mode"], "sampling": cfg["sampling"] if len(cfg["tasks"]) > 1 else None,
            "params_total": summary["params"]["params_total"],
            "params_task_specific": summary["params"]["params_task_specific"],
            "wall_time_s": round(state.elapsed_s, 1), "config": cfg}


METRIC_SUFFIXES = ("_acc", "_f1", "_pearson", "_spearman")
# The Markdown table's score columns, in order.
MARKDOWN_SCORES = ("sst_acc", "quora_acc", "quora_f1", "sts_pearson", "sts_spearman", "cfimdb_acc",
                   "avg")
WALL_TIME_NOTE = "time in training steps; excludes model loading and per-epoch dev evaluation"


def record(results: Path, name: str, facts: dict[str, Any], split: str,
           metrics: dict[str, Any], command: str, extra: dict[str, Any] | None = None) -> None:
    """Add or replace the (name, split) entry, then rewrite the Markdown table beside it."""
    entries = read_json(results) if results.is_file() else []
    entry = {"name": name, "split": split, **{k: v for k, v in facts.items() if k != "config"},
             **{k: v for k, v in metrics.items() if k.endswith(METRIC_SUFFIXES)},
             "avg": metrics["avg"], "total_steps": total_steps(facts["config"]),
             "wall_time_note": WALL_TIME_NOTE,
             "command": command, "machine": machine_name(), **(extra or {})}
    entries = [e for e in entries if (e["name"], e["split"]) != (name, split)] + [entry]
    write_json(results, entries)
    write_markdown(results.with_suffix(".md"), entries)


def write_markdown(path: Path, entries: list[dict[str, Any]]) -> None:
    lines = ["| name | split | SST acc | Quora acc | Quora F1 | STS r | STS ρ | CFIMDB acc | avg | "
             "task-specific params | train time | command |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for e in sorted(entries, key=lambda e: (e["split"], e["name"])):
        share = e["params_task_specific"] / max(1, e["params_total"] - e["params_task_specific"])
        specific = ("all (full models)" if e["mode"] == "separate"
                    else f"{e['params_task_specific']:,} (+{100 * share:.1f}%)")
        scores = " | ".join(points(e.get(k)) for k in MARKDOWN_SCORES)
        lines.append(f"| {e['name']} | {e['split']} | {scores} | {specific} | "
                     f"{e['wall_time_s'] / 60:.1f} min | `{e['command']}` |")
    path.write_text("\n".join(lines) + "\n")
