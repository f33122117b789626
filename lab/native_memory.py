"""Memory of the app's native path with T tasks ready: results/tasks-as-data-native-memory.*

    python -m lab.native_memory SCALE_WORK [--out results/tasks-as-data-native-memory.json]

SCALE_WORK is the --work folder of `palkit bench --scale 1,3,30`, which keeps its
bundles (scale/T<T>). Each bundle runs through the app's own Java core and JNI on the
host (bench/native.py: a fresh JVM per bundle, every task bound when the bundle opens, each task
run in turn). The issue's bound for T tasks is T=1's memory plus T-1 tasks' tensors as the
runtime holds them (fp32, read from the bundle like bench --scale's `task_tensor_bytes`).
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from palkit.bench.machine import host_machine
from palkit.bench.native import measure_native
from palkit.bench.scale import task_tensor_bytes
from palkit.core.fileio import write_json, write_text
from palkit.runtime.manifest import read_manifest


def measure(work: Path) -> dict[str, Any]:
    folders = sorted((p for p in (work / "scale").glob("T*") if p.name[1:].isdigit()),
                     key=lambda p: int(p.name[1:]))
    if not folders or folders[0].name != "T1":
        raise SystemExit(f"{work}/scale: no T1 bundle; run `palkit bench --scale 1,...` "
                         f"with --work {work} first")
    points = []
    for folder in folders:
        names = [t.name for t in read_manifest(folder).tasks]
        rss = measure_native(folder, runs=3, warmup=1)["rss_bytes"]
        points.append({"tasks": len(names), "bundle": str(folder), "rss_bytes": rss,
                       "task_tensor_bytes": task_tensor_bytes(folder, names)})
        print(f"T={len(names)}: {rss}", flush=True)
    one = points[0]["rss_bytes"]["all_tasks"]
    for p in points:
        bound = one + (p["tasks"] - 1) * p["task_tensor_bytes"]
        p["all_ready_over_one_plus_task_tensors"] = p["rss_bytes"]["all_tasks"] / bound
    return {"command": sys.argv, "machine": host_machine(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "points": points}


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = ["# The app's native path: memory with T tasks ready", "",
             f"Machine: {m['model']}, {m['affinity']} cores usable; {data['date']}. Command: "
             f"`python -m {' '.join(['lab.native_memory', *data['command'][1:]])}`.", "",
             "Resident bytes of the host JVM running the app's Java core and JNI (not a phone): "
             "after the bundle's files are checked, after the first task ran (every task is "
             "bound when the bundle opens) and after each task ran in turn.", "",
             "| T | bundle checked | one task run | all T run | all / (T=1 + (T-1) task tensors) |",
             "|---:|---:|---:|---:|---:|"]
    for p in data["points"]:
        r = p["rss_bytes"]
        lines.append(f"| {p['tasks']} | {r['runtime_loaded'] / 1e6:.1f} MB | "
                     f"{r['one_task'] / 1e6:.1f} MB | {r['all_tasks'] / 1e6:.1f} MB | "
                     f"{p['all_ready_over_one_plus_task_tensors']:.3f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="the --work folder of `palkit bench --scale`")
    p.add_argument("--out", type=Path, default=Path("results/tasks-as-data-native-memory.json"))
    args = p.parse_args()
    data = measure(args.work)
    write_json(args.out, data)
    write_text(args.out.with_suffix(".md"), markdown(data))
    print(f"wrote {args.out} and its .md")


if __name__ == "__main__":
    main()
