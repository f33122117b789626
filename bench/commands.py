"""`cli.py bench` and `cli.py report`: argument parsing only; the work is in run.py / report.py."""
from __future__ import annotations

import argparse
from pathlib import Path

# bench.peers imports torch; these names are repeated here so `cli.py --help` stays fast
PEERS = ("torch", "ort-int8", "et-int8")

DEFAULT_BENCH_OUT = "reports/bench-host.json"


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="measure bundles, separate models and peers on this machine",
                       description="Size, cold load, adapter swap, peak RSS and latency (p50/p90) "
                       "of exported bundles on this CPU with the runtimes a phone uses "
                       "(ExecuTorch XNNPACK, ONNX Runtime), each configuration in a fresh process; "
                       "also the peers built from a --mode separate run, the machine's matmul "
                       "ceiling and the accuracy of the exported artifacts. Writes palkit-bench JSON.")
    add = b.add_argument
    add("bundles", nargs="*", metavar="BUNDLE", help="bundle folders (manifest.json); single-task "
        "bundles are grouped as 'the separate models'")
    add("--run", dest="runs", action="append", default=[], metavar="RUN", help="training run(s) the "
        "bundles came from (repeatable): fp32 accuracy, FLOPs; a --mode separate run also "
        "supplies the peers")
    add("--peers", nargs="*", choices=PEERS, default=list(PEERS), help="peers to build and "
        "measure from the separate run (default: all; give none to skip)")
    add("--runtimes", nargs="+", choices=("executorch", "onnxruntime"),
        default=["executorch", "onnxruntime"], help="bundle runtimes to measure")
    add("--threads", nargs="+", type=int, default=[1, 2])
    add("--seq-lens", nargs="+", type=int, default=[32, 128])
    add("--warmup", type=int, default=5, help="untimed runs before timing (default 5)")
    add("--min-runs", type=int, default=30, help="timed runs per configuration (default 30)")
    add("--min-seconds", type=float, default=0.5, help="time each configuration at least this long")
    add("--max-seconds", type=float, default=4.0, help="and at most this long (default 4)")
    add("--accuracy", action=argparse.BooleanOptionalAction, default=True,
        help="score the bundles (as run by their runtime) and the --run models on --splits")
    add("--splits", nargs="+", choices=("dev", "test"), default=["dev", "test"])
    add("--max-examples", type=int, help="score at most N examples per task and split")
    add("--data-dir", help="default $PALKIT_DATA_DIR, then ../shared/data")
    add("--no-ceiling", dest="ceiling", action="store_false", help="skip the matmul ceiling")
    add("--work", default="reports/.bench-work", help="where peers are built and cached")
    add("--out", default=DEFAULT_BENCH_OUT, help=f"JSON to write (default {DEFAULT_BENCH_OUT})")
    b.set_defaults(run=run_bench)

    r = sub.add_parser("report", help="write report.md / report.json / charts from bench results",
                       description="Merge host bench JSON (`cli.py bench`) and phone results "
                       "(the Android app's palkit-bench JSON) into a report with size, latency, "
                       "memory and accuracy tables, charts, and the headline against the targets.")
    r.add_argument("--bench", nargs="+", default=[], metavar="FILE", help="host bench JSON(s)")
    r.add_argument("--device-results", nargs="+", default=[], metavar="FILE",
                   help="benchmark JSON exported by the Android app on a phone")
    r.add_argument("--out", required=True, metavar="DIR", help="report folder, e.g. reports/NAME")
    r.add_argument("--summary", metavar="FILE", help="also write the headline here "
                   "(e.g. reports/summary.json)")
    r.set_defaults(run=run_report)


def run_bench(args: argparse.Namespace) -> int:
    from bench.run import bench
    from trainer.data import resolve_data_dir

    data_dir = resolve_data_dir(args.data_dir) if args.accuracy else None
    bench([Path(p) for p in args.bundles], [Path(p) for p in args.runs], Path(args.out),
          runtimes=args.runtimes, peers=args.peers, threads=args.threads, seq_lens=args.seq_lens,
          warmup=args.warmup, min_runs=args.min_runs, min_seconds=args.min_seconds,
          max_seconds=args.max_seconds, accuracy=args.accuracy, splits=args.splits,
          data_dir=data_dir, max_examples=args.max_examples, work=Path(args.work),
          ceiling=args.ceiling)
    print(f"wrote {args.out}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from bench.report import build_report

    out = Path(args.out)
    report = build_report([Path(f) for f in args.bench], [Path(f) for f in args.device_results],
                          out, Path(args.summary) if args.summary else None)
    missed = [k for k, t in report["targets"].items() if t["met"] is False]
    print(f"wrote {out / 'report.md'}, {out / 'report.json'} and {len(report['charts'])} charts"
          + (f"; summary {args.summary}" if args.summary else ""))
    print(f"targets missed: {', '.join(missed) if missed else 'none'}")
    return 0
