"""Ship a new task later: train one adapter and head against an existing run's frozen trunk.

The new task trains as its own small run in RUN/added/<name>/ (resumable like any run) with the
run's trunk as --base-model and --freeze-trunk, so the trunk file is copied byte for byte, never
re-serialised. When it finishes, its task folder is published into RUN/model/tasks/<name>/ with
one rename; the trunk and the other tasks are not touched.
"""
from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from palkit.core.errors import ConfigError
from palkit.core.fileio import kill_point, remove_tree, replace_dir, staging_dir
from palkit.core.options import resolve_data_dir
from palkit.trainer.checkpoint import (TRUNK_WEIGHTS, CheckpointError, read_json, read_run_config,
                                       resolve_model_dir, run_finished, separate_models,
                                       sha256_file)
from palkit.trainer.config import ADAPTERS, TrainConfig, read_config_file
from palkit.trainer.data import read_examples
from palkit.trainer.tasks import BUILTIN_TASKS, TaskSpec

# Adapter-only training on a frozen trunk wants a larger step than full fine-tuning: on CFIMDB
# (results/accuracy.md: add-task-cfimdb rows) 5e-5 reached 65% dev accuracy in 400 steps, 1e-3 86%.
ADD_TASK_DEFAULTS = {"lr": 1e-3}

# Options a new task takes from the run unless told otherwise: its PAL width and heads, so every
# PAL of a bundle has one shape, and the sequence length the bundle was exported for.
SHAPE_OPTIONS = ("mode", "pal_size", "pal_heads", "pal_layers", "pal_share_projections", "max_len")


@dataclass(frozen=True)
class AddTaskOptions:
    """How `palkit add-task` trains the new task; None: the default (see each field)."""
    adapter: str | None = None          # head | pal; None: what the run's tasks have
    pal_layers: str | None = None       # with PALs; None: the run's placement, or all
    epochs: int | None = None           # None: the quick preset's
    steps_per_epoch: int | None = None  # None: the quick preset's
    batch_size: int | None = None       # None: the quick preset's
    lr: float | None = None             # None: ADD_TASK_DEFAULTS
    max_len: int | None = None          # None: the run's own
    seed: int | None = None             # None: the run's own
    save_every: int | None = None       # also checkpoint every N steps; None: at epoch ends

    def training(self) -> dict[str, Any]:
        """The training options given, as TrainConfig fields."""
        placement = ("adapter", "pal_layers")
        return {k: v for k, v in asdict(self).items() if v is not None and k not in placement}


def add_task(run: Path, spec: TaskSpec, data_dir: str | None,
             options: AddTaskOptions = AddTaskOptions(), resume: bool = False) -> Path:
    """Train `spec` on the frozen trunk of `run`; return the new task folder."""
    from palkit.trainer.train import train

    run = Path(run)
    cfg = task_run_config(run, spec, data_dir, options)
    sub_run = Path(cfg.out)
    if resume:
        if was_added(sub_run, run / "model" / "tasks" / spec.name):
            return run / "model" / "tasks" / spec.name   # killed after its publish: nothing to do
        for stale in (run / "model" / "tasks").glob(f".{spec.name}.*"):   # a killed publish
            remove_tree(stale)                                            # left it staged
    target = check_new_task(run, spec)
    # A data file of the wrong kind stops here, before anything is trained or written; malformed
    # rows are treated as training will treat them (--bad-rows).
    for split in ("train", "dev"):
        read_examples(spec, resolve_data_dir(data_dir), split, cfg.bad_rows)
    trunk_file = run / "model" / "trunk" / TRUNK_WEIGHTS
    trunk_sha = sha256_file(trunk_file)
    # A sub-run killed before it wrote its config is started afresh.
    sub = train(cfg, resume=resume and (sub_run / "config.json").is_file())
    new_task = sub / "model" / "tasks" / spec.name
    if read_json(new_task / "adapter_config.json")["trunk_sha256"] != trunk_sha \
            or sha256_file(trunk_file) != trunk_sha:
        raise CheckpointError(f"{new_task}: adapter does not match the trunk of {run}; nothing "
                              "was added")
    build = staging_dir(target)
    try:
        shutil.copytree(new_task, build, dirs_exist_ok=True)
        kill_point("add-task")
        if target.exists():  # a concurrent add of the same name won the race
            raise CheckpointError(f"{target}: task '{spec.name}' appeared meanwhile; nothing "
                                  "was added")
        replace_dir(build, target)
    finally:
        remove_tree(build)
    kill_point("add-task-placed")
    return target


def was_added(sub_run: Path, target: Path) -> bool:
    """True when `target` is the finished sub-run's task, published by an earlier add-task."""
    new_task = sub_run / "model" / "tasks" / target.name
    if not (target.is_dir() and run_finished(sub_run)):
        return False
    return all((target / f.name).is_file() and sha256_file(target / f.name) == sha256_file(f)
               for f in new_task.iterdir())


def check_new_task(run: Path, spec: TaskSpec) -> Path:
    """RUN/model/tasks/<name>, refused unless `run` is a run with a shared trunk and no such task."""
    if separate_models(run):
        raise CheckpointError(f"{run}: a --mode separate run has no shared trunk to add a task to")
    model_dir = resolve_model_dir(run)
    if model_dir != run / "model":
        raise CheckpointError(f"{run}: add-task needs a run directory (RUN/model), not a model folder")
    target = model_dir / "tasks" / spec.name
    if target.exists():
        raise CheckpointError(f"{target}: task '{spec.name}' already exists in this run; "
                              "choose another --task name")
    return target


def adapter_options(run_cfg: dict[str, Any], adapter: str | None,
                    pal_layers: str | None) -> dict[str, Any]:
    """The new task's mode and placement: the run's own unless --adapter says otherwise. A PAL
    added to a shared run is placed in every layer unless --pal-layers says where."""
    if adapter is None:
        if pal_layers is not None and run_cfg["mode"] != "pals":
            raise ConfigError("--pal-layers places PALs: add --adapter pal (this run has none)")
        return {"mode": run_cfg["mode"], "pal_layers": pal_layers or run_cfg["pal_layers"]}
    if adapter not in ADAPTERS:
        raise ConfigError(f"--adapter must be one of {', '.join(ADAPTERS)}, got '{adapter}'")
    if adapter == "head":
        if pal_layers is not None:
            raise ConfigError("--pal-layers places PALs: a task added with --adapter head has none")
        return {"mode": "shared", "pal_layers": run_cfg["pal_layers"]}
    placed = pal_layers or (run_cfg["pal_layers"] if run_cfg["mode"] == "pals" else "all")
    return {"mode": "pals", "pal_layers": placed}


def task_run_config(run: Path, spec: TaskSpec, data_dir: str | None,
                    options: AddTaskOptions) -> TrainConfig:
    """The small run in RUN/added/<name>: the run's PAL shape and seed, its trunk frozen."""
    run_cfg = read_run_config(run)
    custom = () if BUILTIN_TASKS.get(spec.name) == spec else (spec.to_dict(),)
    return TrainConfig(**{
        **{k: run_cfg[k] for k in SHAPE_OPTIONS},
        **adapter_options(run_cfg, options.adapter, options.pal_layers),
        "seed": run_cfg["seed"],
        **ADD_TASK_DEFAULTS,
        **options.training(),
        "tasks": (spec.name,), "custom_tasks": custom,
        "base_model": str(run / "model" / "trunk"),
        "freeze_trunk": True, "tune_adapters_after": 0, "data_dir": data_dir,
        "out": str(run / "added" / spec.name)})


def task_from_options(name: str, task_file: str | None, options: dict[str, Any]) -> TaskSpec:
    """A built-in task by name, a task file (.json/.toml), or a description given as flags."""
    described = {k: v for k, v in options.items() if v is not None}
    if task_file:
        data = read_config_file(task_file)
        data.setdefault("name", name)
        if data["name"] != name:
            raise ConfigError(f"{task_file}: describes task '{data['name']}', not '{name}'")
        return TaskSpec.from_dict(data)
    if not described:
        if name not in BUILTIN_TASKS:
            raise ConfigError(f"task '{name}' is not built in; describe it with --task-file or "
                             "--kind/--text-columns/--label-column/--labels/--train-file/--dev-file")
        return BUILTIN_TASKS[name]
    files = {"train": described.pop("train_file", None), "dev": described.pop("dev_file", None)}
    if None in files.values():
        raise ConfigError(f"task '{name}': --train-file and --dev-file are both needed")
    return TaskSpec.from_dict({"name": name, **described, "files": files})
