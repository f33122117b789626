"""`cli.py export`, `cli.py predict`, `cli.py demo`: argument parsing; work is in bundle/runtime."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trainer.data import DATA_DIR_ENV

PAIR_SEPARATOR = "|||"


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("export", help="quantize and export a run to a bundle (ExecuTorch / ONNX)",
                       description="Write a bundle folder (see export/BUNDLE.md): one shared trunk "
                       "file per runtime plus a small file per task, verified against PyTorch.")
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or model folder; a --mode "
                   "separate run gives one bundle per model under --out")
    e.add_argument("--target", choices=("android", "executorch", "onnx"), default="android",
                   help="android (default): ExecuTorch + ONNX Runtime files; or one runtime")
    e.add_argument("--quant", choices=("int8", "fp32"), default="int8")
    e.add_argument("--tasks", nargs="+", help="export only these tasks (default: all)")
    e.add_argument("--max-len", type=int, help="max tokens per input (default 128)")
    e.add_argument("--onnx", action=argparse.BooleanOptionalAction, default=True,
                   help="with --target android, also write the ONNX Runtime files (default)")
    e.add_argument("--out", help="bundle folder (default bundles/<run name>-<quant>)")
    e.add_argument("--adapter", metavar="TASK", help="add (or with --replace, rewrite) only this "
                   "task in the existing bundle --out; its trunk files stay untouched")
    e.add_argument("--replace", action="store_true", help="with --adapter: overwrite a task")
    e.add_argument("--data-dir", help=f"dev data for verification (default ${DATA_DIR_ENV}, then "
                   "../shared/data; built-in sentences when none)")
    e.add_argument("--all-tasks", action=argparse.BooleanOptionalAction, default=True,
                   help="ExecuTorch, several tasks: also write _all_tasks.pte, every task on one "
                   "input in one call with the trunk loaded once (default)")
    e.add_argument("--min-agreement", type=float, default=0.9, help="int8: fail when fewer "
                   "predictions than this agree with PyTorch fp32 (default 0.9)")
    e.set_defaults(run=run_export)

    p = sub.add_parser("predict", help="run a bundle on text",
                       description="Classify text with a bundle (one task, or every task).")
    p.add_argument("bundle", metavar="BUNDLE")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--task", help="task name")
    g.add_argument("--all", action="store_true", help="run every task on the input")
    p.add_argument("texts", nargs="+", metavar="TEXT", help="one text, or two for pair tasks")
    p.add_argument("--runtime", choices=("executorch", "onnxruntime"),
                   help="default: the bundle's first (executorch when present)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run_predict)

    d = sub.add_parser("demo", help="interactive demo: type text, see every task's result",
                       description="Reads lines from stdin. A line is one text, or two texts "
                       f"separated by '{PAIR_SEPARATOR}' for pair tasks. ':task NAME' runs only "
                       "that task, ':all' every task, ':quit' ends.")
    d.add_argument("bundle", metavar="BUNDLE")
    d.add_argument("--runtime", choices=("executorch", "onnxruntime"))
    d.add_argument("--threads", type=int, default=1)
    d.set_defaults(run=run_demo)


def _data_dir(value: str | None) -> Path | None:
    from trainer.data import DataError, resolve_data_dir
    try:
        return resolve_data_dir(value)
    except DataError:
        if value:
            raise
        return None


def run_export(args: argparse.Namespace) -> int:
    from export.bundle import add_adapter, export_run
    data_dir = _data_dir(args.data_dir)
    if data_dir is None:
        print("note: no data directory found; verifying on built-in sentences", file=sys.stderr)
    if args.adapter:
        if not args.out:
            raise ValueError("--adapter needs --out EXISTING_BUNDLE")
        add_adapter(Path(args.run_dir), args.adapter, Path(args.out), args.replace, data_dir,
                    args.min_agreement)
        return 0
    out = Path(args.out) if args.out else Path("bundles") / f"{Path(args.run_dir).resolve().name}-{args.quant}"
    for path in export_run(Path(args.run_dir), out, args.target, args.quant, args.tasks, args.max_len,
                           args.onnx, data_dir, args.min_agreement, args.all_tasks):
        print(f"bundle: {path}")
        summarize(path)
    return 0


def summarize(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    v = json.loads((path / "verify.json").read_text())
    for rel, f in sorted(m["files"].items()):
        print(f"  {rel:36s} {f['bytes'] / 1024:10.1f} KiB")
    for rt, r in v["runtimes"].items():
        for part, checked in (("", r["tasks"]), ("all-tasks program/", r.get("all_tasks_program",
                                                                             {}).get("tasks", {}))):
            for t, x in checked.items():
                print(f"  verify {rt}/{part}{t}: agreement {x['agreement']:.3f}, max |diff| "
                      f"{x['max_abs_diff']:.2e} ({x['source']})")


def _engine(args):
    from export.runtime import Engine, load_bundle
    t0 = time.perf_counter()
    bundle = load_bundle(args.bundle)
    engine = Engine(bundle, args.runtime or "", args.threads)
    return engine, (time.perf_counter() - t0) * 1000


def run_predict(args: argparse.Namespace) -> int:
    from export.runtime import BundleError
    if len(args.texts) > 2:
        raise BundleError(f"give one or two texts, got {len(args.texts)}")
    engine, load_ms = _engine(args)
    pair = args.texts[1] if len(args.texts) == 2 else None
    preds = (engine.predict_all(args.texts[0], pair) if args.all
             else [engine.predict(args.task, args.texts[0], pair)])
    if args.json:
        print(json.dumps({"runtime": engine.runtime, "load_ms": load_ms,
                          "predictions": [p.to_dict() for p in preds]}, indent=2))
        return 0
    for p in preds:
        print(f"{p.summary()}   [{p.latency_ms:.1f} ms, {p.tokens} tokens]")
    print(f"({engine.runtime}; bundle loaded in {load_ms:.0f} ms)")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from export.runtime import BundleError
    engine, load_ms = _engine(args)
    tasks = list(engine.bundle.tasks)
    print(f"palkit demo: {engine.bundle.folder} on {engine.runtime}; trunk loaded in "
          f"{load_ms:.0f} ms (file checks {engine.bundle.verify_seconds * 1000:.0f} ms)")
    for t in tasks:
        print(f"  adapter {t}: first swap {engine.swap(t):.1f} ms, swap back "
              f"{engine.swap(t):.2f} ms")
    print(f"tasks: {', '.join(tasks)}. Type text (pairs: a {PAIR_SEPARATOR} b), ':task NAME', "
          "':all', ':quit'.")
    selected = tasks
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        if line in (":quit", ":q", ":exit"):
            break
        if line == ":all":
            selected = tasks
            continue
        if line.startswith(":task"):
            name = line[5:].strip()
            if name not in engine.bundle.tasks:
                print(f"error: no task '{name}' (tasks: {', '.join(tasks)})")
            else:
                selected = [name]
            continue
        parts = [s.strip() for s in line.split(PAIR_SEPARATOR, 1)]
        a, b = parts[0], (parts[1] if len(parts) == 2 else None)
        for name in selected:
            info = engine.bundle.tasks[name]
            if info.is_pair != (b is not None):
                need = "two texts (a ||| b)" if info.is_pair else "one text"
                print(f"  {name}: skipped, needs {need}")
                continue
            try:
                p = engine.predict(name, a, b if info.is_pair else None)
            except BundleError as e:
                print(f"  error: {e}")
                break
            swap = f", swap {p.swap_ms:.2f} ms" if p.swap_ms else ""
            print(f"  {p.summary():40s} {p.latency_ms:7.1f} ms{swap}")
    return 0
