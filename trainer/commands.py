"""`palkit train`, `add-task`, `bench-train`: the trainer's commands (parsing only).

The work is in train.py, add_task.py and profile.py, imported inside each command so
that `palkit --help` does not load torch. `train`'s flags are built from TrainConfig's fields, so
every training option is defined once (trainer/config.py) and reachable as a flag and in a file.
"""
from __future__ import annotations

import inspect
from dataclasses import Field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from palkit.core.options import TRAINING, DataDirOption
from palkit.runtime.kinds import TASK_KINDS
from palkit.trainer.config import (ADAPTERS, FIELD_TYPES, TrainConfig, build_config, config_fields,
                                   field_default, read_config_file)
from palkit.trainer.tasks import resolve_tasks

app = typer.Typer()


def _train_parameter(f: Field) -> inspect.Parameter:
    """One `palkit train` flag from one TrainConfig field (None = not given on the command line)."""
    choices = f.metadata["choices"]
    kind = Literal[choices] if choices else FIELD_TYPES[f.type][0]
    flag = f.name.replace("_", "-")
    names = [f"--{flag}/--no-{flag}"] if kind is bool else [f"--{flag}"]
    default = field_default(f)
    shown = ",".join(default) if isinstance(default, tuple) else default
    default_note = f" (default {shown})" if shown not in (None, "") else ""
    option = typer.Option(*names, help=f.metadata["help"] + default_note, show_default=False,
                          rich_help_panel=f.metadata["panel"], metavar=f.metadata["metavar"])
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[kind], option])


def _config_values(options: dict[str, Any]) -> dict[str, Any]:
    """Flag values in TrainConfig's terms: comma lists split, custom task files read."""
    values = dict(options)
    if values["tasks"] is not None:
        values["tasks"] = tuple(t for item in values["tasks"] for t in item.split(",") if t)
    if values["custom_tasks"] is not None:
        values["custom_tasks"] = tuple(read_config_file(p) for p in values["custom_tasks"])
    return values


def train(**options: Any) -> None:
    """Train a BERT trunk jointly on several tasks (PALs, shared, or separate models).

    Every option can also be set in a --config file (.json or .toml, same names); flags given here
    win over the file, the file over the --preset.
    """
    from palkit.core.options import resolve_data_dir
    from palkit.trainer.train import train as run_training

    config_file, resume = options.pop("config"), options.pop("resume")
    given = _config_values(options)
    out = Path(given["out"] or TrainConfig.out)
    if resume and (out / "config.json").is_file() and not config_file:
        from palkit.trainer.checkpoint import read_run_config
        # A resumed run keeps its own options unless a flag says otherwise.
        saved = read_run_config(out)
        cfg = TrainConfig.from_dict({**saved, **{k: v for k, v in given.items() if v is not None}})
    else:
        cfg = build_config(given, config_file)
    resolve_tasks(cfg.tasks, list(cfg.custom_tasks))  # fail on unknown tasks before loading BERT
    if cfg.data_source == "files":
        resolve_data_dir(cfg.data_dir)
    run_dir = run_training(cfg, resume=resume)
    typer.echo(f"done: {run_dir}")


# Every TrainConfig field as a flag, and --config: what `train` and `bench-train` both take.
_CONFIG_PARAMETERS = [
    *(_train_parameter(f) for f in config_fields()),
    inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Annotated[Optional[Path], typer.Option(
                          "--config", metavar="FILE", rich_help_panel="Run",
                          help="a .json or .toml file holding any of these options")]),
]
train.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    *_CONFIG_PARAMETERS,
    inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=False,
                      annotation=Annotated[bool, typer.Option(
                          "--resume", rich_help_panel="Run",
                          help="continue the run in --out from its last checkpoint")]),
])
app.command(rich_help_panel=TRAINING, epilog="Example: palkit train --pal-layers top "
            "--out runs/pals-top")(train)


@app.command("add-task", rich_help_panel=TRAINING,
             epilog="Example: palkit add-task runs/default --task cfimdb")
def add_task(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="an existing PAL or shared "
                                            "run")],
    task: Annotated[str, typer.Option(help="the new task's name (e.g. cfimdb)")],
    data_dir: DataDirOption = None,
    task_file: Annotated[Optional[Path], typer.Option(
        help="a .json/.toml task description (fields of a custom task)")] = None,
    kind: Annotated[Optional[Literal[TASK_KINDS]], typer.Option()] = None,
    text_columns: Annotated[Optional[str], typer.Option(metavar="COL[,COL]")] = None,
    label_column: Annotated[Optional[str], typer.Option()] = None,
    labels: Annotated[Optional[str], typer.Option(
        metavar="NAME,NAME...", help="class names (label i in the data = the i-th name)")] = None,
    score_range: Annotated[Optional[tuple[float, float]], typer.Option(
        metavar="LOW HIGH")] = None,
    train_file: Annotated[Optional[str], typer.Option(help="relative to --data-dir")] = None,
    dev_file: Annotated[Optional[str], typer.Option(help="relative to --data-dir")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="default: the quick preset")] = None,
    steps_per_epoch: Annotated[Optional[int], typer.Option(help="default: the quick preset")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="default: the quick preset")] = None,
    lr: Annotated[Optional[float], typer.Option(help="default 1e-3 (results/accuracy.md)")] = None,
    max_len: Annotated[Optional[int], typer.Option(help="default: the run's own")] = None,
    seed: Annotated[Optional[int], typer.Option(help="default: the run's own")] = None,
    save_every: Annotated[Optional[int], typer.Option(
        metavar="N", help="also checkpoint every N steps, for --resume (default: at epoch ends)")
    ] = None,
    adapter: Annotated[Optional[Literal[ADAPTERS]], typer.Option(
        help="what the task trains on the frozen trunk: head (a classifier on the trunk's "
             "output) or pal (PALs and a head); default: what the run's tasks have")] = None,
    pal_layers: Annotated[Optional[str], typer.Option(
        metavar="all|top|bottom|top-N|I,J,..", help="where the new task's PALs go (with "
        "--adapter pal); default: the run's placement, or all for a shared run")] = None,
    resume: Annotated[bool, typer.Option(help="continue an interrupted add-task")] = False,
) -> None:
    """Train one new task's adapter and head on a run's frozen trunk.

    The trunk file stays bit-identical; the task is added to RUN/model/tasks. Built-in tasks need
    only --task; others are described by --task-file or the description flags. A task may bring
    its own adapter (--adapter, --pal-layers) whatever the run's tasks have.
    """
    from palkit.trainer.add_task import AddTaskOptions, task_from_options
    from palkit.trainer.add_task import add_task as run_add_task

    split = (lambda s: s.split(",") if s else None)
    spec = task_from_options(task, str(task_file) if task_file else None, {
        "kind": kind, "text_columns": split(text_columns), "label_column": label_column,
        "labels": split(labels), "score_range": list(score_range) if score_range else None,
        "train_file": train_file, "dev_file": dev_file})
    options = AddTaskOptions(adapter=adapter, pal_layers=pal_layers, epochs=epochs,
                             steps_per_epoch=steps_per_epoch, batch_size=batch_size, lr=lr,
                             max_len=max_len, seed=seed, save_every=save_every)
    folder = run_add_task(run_dir, spec, data_dir, options, resume=resume)
    typer.echo(f"added task '{spec.name}': {folder}")


def bench_train(**options: Any) -> None:
    """Time training steps of a config (same options as train) and append the figures to a
    JSON list: steps/s, tokens/s, CPU time, the share of data / forward+backward / optimizer,
    graphs and capture time with --cuda-graphs, and on a GPU the model-FLOP utilisation and peak
    memory. --modes times several ways of running the step side by side, one entry each. Dev
    scoring and checkpoints are not timed."""
    from palkit.trainer.profile import append_entry, bench_modes, bench_training
    from palkit.trainer.results import option_flags

    steps, warmup, repeats = options.pop("steps"), options.pop("warmup"), options.pop("repeat")
    results_file, machine = options.pop("results"), options.pop("machine")
    config_file, modes = options.pop("config"), options.pop("modes")
    cfg = build_config(_config_values(options), config_file)
    if modes:
        entries = bench_modes(cfg, modes.split(","), steps, warmup, repeats)
    else:
        entries = [bench_training(cfg, steps, warmup, repeats)]
    defaults = TrainConfig().to_dict()
    flags = option_flags(cfg.to_dict(), defaults, {"out", "data_dir", "custom_tasks"})
    for entry in entries:
        entry["command"] = " ".join(["palkit", "bench-train", *flags, "--steps", str(steps),
                                     "--warmup", str(warmup), "--repeat", str(repeats),
                                     *(["--modes", modes] if modes else [])])
        entry["machine"] = machine or entry["device"]
        append_entry(results_file, entry)
        if "skipped" in entry or "failed" in entry:
            why = f"skipped, {entry['skipped']}" if "skipped" in entry else entry["failed"]
            typer.echo(f"{entry['bench_mode']}: {why}")
            continue
        share = ", ".join(f"{k} {100 * v:.0f}%" for k, v in entry["shares"].items())
        mfu = f", MFU {100 * entry['mfu']:.1f}%" if entry["mfu"] is not None else ""
        graphs = (f", {entry['graphs']} graphs captured in {entry['capture_s']:.1f} s"
                  if entry["captured"] else "")
        typer.echo(f"{entry['bench_mode']}: {entry['steps_per_s']:.2f} steps/s, "
                   f"{entry['tokens_per_s']:.0f} tokens/s{mfu} ({share}){graphs}")
    typer.echo(f"appended {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} to "
               f"{results_file}")


_BENCH_OPTIONS = [
    ("steps", int, 50, typer.Option(metavar="N", help="timed steps per repeat")),
    ("warmup", int, 5, typer.Option(metavar="N", help="untimed steps first (allocation, "
                                    "compilation)")),
    ("repeat", int, 3, typer.Option(metavar="N", help="timed passes; the entry keeps each and "
                                    "reports the median")),
    ("results", Path, Path("runs/results/train-speed.json"), typer.Option(
        metavar="FILE", help="JSON list to append the entry to")),
    ("machine", Optional[str], None, typer.Option(
        metavar="TEXT", help="how to name the machine in the entry (default: the device)")),
    ("modes", Optional[str], None, typer.Option(
        metavar="MODE[,MODE...]", help="time each of eager-fp32, eager-bf16, compiled, captured, "
        "compiled-captured (bf16 unless named fp32) one after another, one entry each; a mode "
        "this machine cannot run is recorded as skipped, with the reason")),
]
bench_train.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    *_CONFIG_PARAMETERS,
    *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                        annotation=Annotated[kind, option])
      for name, kind, default, option in _BENCH_OPTIONS),
])
app.command("bench-train", rich_help_panel=TRAINING, epilog="Example: palkit bench-train "
            "--steps 100 --machine '2-core AMD EPYC VM'")(bench_train)
