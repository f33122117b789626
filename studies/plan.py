"""A study file (.toml) -> the jobs that train and score its runs.

A study file has a [base] table of training options shared by every run and a list of [[run]]
tables, each with a name, its seeds and its own options (which win over [base]). An option
value "run:NAME" is the folder of the same seed's run NAME in this study, which then trains
first (for --distill-from). A `mode = "separate"` run becomes one job per task, trained side by
side into RUN/models/<task> exactly as `palkit train --mode separate` lays them out.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palkit.core.errors import PalkitError
from palkit.trainer.config import TrainConfig, build_config

RUN_REFERENCE = "run:"


class StudyError(PalkitError, ValueError):
    """The study file cannot be planned; the message names the run and field."""


@dataclass(frozen=True)
class Job:
    key: str                      # "NAME/seed-S" or "NAME/seed-S/TASK" for a separate model
    run: str                      # the study run it belongs to
    seed: int
    out: Path
    config: TrainConfig           # what it trains, or (a separate run's folder) what it holds
    trains: bool                  # False for a separate run's folder: its models train
    after: tuple[str, ...]        # jobs that must finish first
    score: bool                   # score dev and test when done


def read_study(path: Path) -> dict[str, Any]:
    try:
        study = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise StudyError(f"{path}: cannot read the study file ({e})") from None
    runs = study.get("run")
    if not isinstance(runs, list) or not runs:
        raise StudyError(f"{path}: no [[run]] tables; add at least one run with a name")
    for i, run in enumerate(runs):
        if not isinstance(run.get("name"), str) or "/" in run["name"]:
            raise StudyError(f"{path}: run {i + 1} needs a name (text without '/')")
        seeds = run.get("seeds", [0])
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            raise StudyError(f"{path}: run '{run['name']}': seeds must be a list of integers")
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        raise StudyError(f"{path}: run names repeat ({', '.join(names)})")
    return study


def plan_jobs(study: dict[str, Any], out: Path, machine: dict[str, Any]) -> list[Job]:
    """Every job of the study, runs in file order; `machine` holds options the study leaves to
    the machine (base_model, data_dir, device), which the study's own options cannot set."""
    base = dict(study.get("base", {}))
    jobs: list[Job] = []
    for run in study["run"]:
        for seed in run.get("seeds", [0]):
            options = {**base, **run.get("options", {}), **machine, "seed": seed}
            after = _resolve_references(options, seed, out)
            jobs += _run_jobs(run["name"], seed, out / run["name"] / f"seed-{seed}", options, after)
    return jobs


def _resolve_references(options: dict[str, Any], seed: int, out: Path) -> tuple[str, ...]:
    """Replace each "run:NAME" value with that run's folder (in place); the jobs it needs."""
    after = []
    for key, value in options.items():
        if isinstance(value, str) and value.startswith(RUN_REFERENCE):
            other = value[len(RUN_REFERENCE):]
            options[key] = str(out / other / f"seed-{seed}")
            after.append(f"{other}/seed-{seed}")
    return tuple(after)


def _run_jobs(name: str, seed: int, folder: Path, options: dict[str, Any],
              after: tuple[str, ...]) -> list[Job]:
    key = f"{name}/seed-{seed}"
    try:
        cfg = build_config({**options, "out": str(folder)})
    except (TypeError, ValueError) as e:
        raise StudyError(f"run '{key}': {e}") from None
    if cfg.mode != "separate":
        return [Job(key, name, seed, folder, cfg, True, after, score=True)]
    models = [Job(f"{key}/{task}", name, seed, folder / "models" / task,
                  cfg.replace(mode="shared", tasks=(task,), out=str(folder / "models" / task)),
                  True, after, score=False) for task in cfg.tasks]
    return [*models, Job(key, name, seed, folder, cfg, False, tuple(m.key for m in models),
                         score=True)]
