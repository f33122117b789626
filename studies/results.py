"""A finished study folder -> one row per configuration: mean ± spread over seeds.

Per seed it reads what training and `palkit evaluate` wrote: the best epoch's dev metrics
(RUN/model/summary.json; a separate run merges its models' best epochs), the dev average after
every epoch (RUN/metrics.jsonl: the curve that shows whether it has stopped rising), the test
metrics (RUN/test.json, when it was scored), optimizer steps and training time.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from palkit.trainer.checkpoint import read_json, read_metrics, separate_models
from palkit.trainer.metrics import average_score
from palkit.trainer.results import canonical_command, total_steps
from palkit.trainer.tasks import resolve_tasks

METRICS = ("sst_acc", "quora_acc", "quora_f1", "sts_pearson", "sts_spearman")


def seed_result(run: Path) -> dict[str, Any]:
    """One seed of one configuration."""
    cfg = read_json(run / "config.json")
    models = separate_models(run)
    if models:
        subs = [seed_result(m) for m in models]
        dev = {k: v for s in subs for k, v in s["dev"].items() if k != "avg"}
        dev["avg"] = average_score(resolve_tasks(cfg["tasks"]), dev)
        curve, train_s = None, sum(s["train_s"] for s in subs)
    else:
        dev = read_json(run / "model" / "summary.json")["dev"]
        records = read_metrics(run)
        curve = [round(r["dev"]["avg"] * 100, 2) for r in records if r["phase"] == "joint"]
        train_s = records[-1]["elapsed_s"]
    test = read_json(run / "test.json") if (run / "test.json").is_file() else None
    return {"seed": cfg["seed"], "dev": dev, "test": test, "dev_curve": curve,
            "total_steps": total_steps(cfg), "train_s": train_s,
            "command": canonical_command(cfg, str(run))}


def mean_spread(values: list[float]) -> dict[str, Any]:
    """Mean and sample standard deviation (None for one seed), in points."""
    points = [100 * v for v in values]
    return {"mean": round(statistics.mean(points), 2),
            "sd": round(statistics.stdev(points), 2) if len(points) > 1 else None,
            "n": len(points)}


def configuration_row(name: str, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    tests = [s["test"] for s in seeds if s["test"] is not None]
    return {"name": name, "seeds": [s["seed"] for s in seeds],
            "dev_avg": mean_spread([s["dev"]["avg"] for s in seeds]),
            "dev": {m: mean_spread([s["dev"][m] for s in seeds]) for m in METRICS
                    if all(m in s["dev"] for s in seeds)},
            "test_avg": mean_spread([t["avg"] for t in tests]) if tests else None,
            "test_seeds": [s["seed"] for s in seeds if s["test"] is not None],
            "total_steps": seeds[0]["total_steps"],
            "train_min": round(statistics.mean(s["train_s"] for s in seeds) / 60, 1),
            "per_seed": seeds}


def study_rows(study: Path) -> list[dict[str, Any]]:
    """Configurations in the study's own order, each with all its seeds."""
    record = read_json(study / "study.json")
    order: dict[str, list[Path]] = {}
    for job in record["jobs"]:
        if job["key"].count("/") == 1:   # a run, not one model of a separate run
            order.setdefault(job["run"], []).append(study / job["run"] / f"seed-{job['seed']}")
    return [configuration_row(name, [seed_result(run) for run in runs])
            for name, runs in order.items()]


def _cell(stat: dict[str, Any] | None) -> str:
    if stat is None:
        return "–"
    return f"{stat['mean']:.1f}" + (f" ± {stat['sd']:.1f}" if stat["sd"] is not None else "")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| configuration | seeds | dev avg | SST acc | Quora acc | STS r | test avg (seeds) "
             "| optimizer steps | dev avg after each epoch (first seed) | train time |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        steps = r["total_steps"]
        steps = (" + ".join(f"{v:,}" for v in steps.values()) if isinstance(steps, dict)
                 else f"{steps:,}")
        curve = r["per_seed"][0]["dev_curve"]
        test = (f"{_cell(r['test_avg'])} ({','.join(map(str, r['test_seeds']))})"
                if r["test_avg"] else "–")
        lines.append(f"| {r['name']} | {len(r['seeds'])} | {_cell(r['dev_avg'])} | "
                     f"{_cell(r['dev'].get('sst_acc'))} | {_cell(r['dev'].get('quora_acc'))} | "
                     f"{_cell(r['dev'].get('sts_pearson'))} | {test} | {steps} | "
                     f"{' → '.join(f'{c:.1f}' for c in curve) if curve else '–'} | "
                     f"{r['train_min']:.1f} min |")
    return "\n".join(lines) + "\n"
