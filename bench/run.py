"""`palkit bench`: measure bundles, the three separate models and the peers on this machine.

The subjects (bench/subjects.py) are measured in fresh worker processes (bench/worker.py, in the
order `plan` gives), their accuracy last; everything lands in one palkit-bench JSON
(bench/schema.py).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from palkit.bench.flops import model_flops
from palkit.bench.machine import host_machine
from palkit.bench.options import BenchOptions, LatencyBudget
from palkit.bench.plan import time_pairs
from palkit.bench.schema import (SCHEMA, VERSION, BenchError, BenchFileError, latency_id,
                                 swap_and_memory, validate)
from palkit.bench.subjects import Subject, discover
from palkit.core.errors import PalkitError
from palkit.core.fileio import write_text
from palkit.runtime.manifest import MANIFEST_FILE, read_manifest
from palkit.runtime.signing import resolve_trust_key, verify_bundle_signature
from palkit.trainer.checkpoint import read_metrics, read_run_config, separate_models
from palkit.trainer.metrics import average_score, sentence_metrics
from palkit.trainer.tasks import BUILTIN_TASKS, TaskSpec
from palkit.ui.progress import say, track

LOAD_REPEATS = 3     # load/swap/memory worker processes per subject


@dataclass(frozen=True)
class Job:
    """One worker process: the ceiling at a thread count, a subject's load or its latency (the
    verdict's paired ratios follow their own plan: bench/plan.py)."""
    kind: str                    # ceiling | load | latency | native
    threads: int
    seq_len: int
    subject: Subject | None = None
    round: int = 0               # which --rounds pass (latency)


# ---- running workers ---------------------------------------------------------------------------

def run_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One fresh `python -m palkit.bench.worker` process; its JSON, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="palkit-bench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        # one thread per pool the worker did not ask for; the worker sets its own counts
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(spec.get("threads", 1))
        try:
            proc = subprocess.run([sys.executable, "-m", "palkit.bench.worker", str(spec_path),
                                   str(out_path)], env=env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"worker timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not out_path.is_file():
            tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"]
            return {"error": f"worker exit {proc.returncode}: {tail[0][:300]}"}
        return json.loads(out_path.read_text())


def subject_flops(s: Subject, seq: int, sequential_all: bool) -> dict[str, int | None]:
    """Matmul FLOPs of each task and of all tasks on one input; None where a model is unknown."""
    out: dict[str, int | None] = {}
    for task in s.tasks:
        info = s.models.get(task)
        out[f"task:{task}"] = (model_flops(info.bert, info.pal, info.tasks[task], seq)["matmul"]
                               if info else None)
    if s.role == "pal" and not sequential_all and s.models:
        info = next(iter(s.models.values()))
        out["all_tasks"] = model_flops(info.bert, info.pal, [info.tasks[t] for t in s.tasks],
                                       seq, all_tasks=True)["matmul"]
    else:
        singles = [out[f"task:{t}"] for t in s.tasks]
        out["all_tasks"] = None if None in singles else sum(singles)  # type: ignore[arg-type]
    return out


# ---- one job each ------------------------------------------------------------------------------

def record_ceiling(job: Job, data: dict[str, Any], o: BenchOptions) -> None:
    r = run_worker({"mode": "ceiling", "threads": job.threads, "min_seconds": 0.5},
                   o.worker_timeout)
    data["ceiling"][str(job.threads)] = r
    say(f"ceiling, {job.threads} thread(s): fp32 {r.get('fp32_gflops_best', 0):.1f} GFLOP/s, "
        f"int8 {r.get('int8_gops_best') or 0:.1f} GOP/s")


def record_load(job: Job, data: dict[str, Any], o: BenchOptions) -> None:
    """Cold load, swap and memory of one subject (and of its all-tasks program alone)."""
    s, timeout = job.subject, o.worker_timeout
    entry = {"role": s.role, "runtime": s.runtime, "precision": s.precision, "label": s.label,
             "pal_layers": list(s.pal_layers), "num_layers": s.num_layers, "tasks": list(s.tasks),
             "bundle": s.sizes, "all_tasks_program": s.all_tasks is not None,
             "fp32_model_dirs": {t: str(i.model_dir) for t, i in s.models.items()},
             "sources": s.tasks, **s.extra}
    spec = {"threads": job.threads, "seq_len": job.seq_len, "subject": s.worker_subject()}
    # A cold load and a swap happen once per process; one process's figure moved by 2x between
    # bench runs on the same files, so the figures are medians over LOAD_REPEATS processes.
    loads = [run_worker({"mode": "load", **spec}, timeout) for _ in range(LOAD_REPEATS)]
    failed = next((r["error"] for r in loads if "error" in r), None)
    if failed:
        entry["error"] = failed
        data["notes"].append(f"{s.name}: load measurement failed: {failed}")
    else:
        entry.update(load_entry(s, loads))
    if s.all_tasks is not None and "error" not in entry:
        # Every task resident the cheap way: the all-tasks program holding the trunk once.
        prog = run_worker({"mode": "load_program", **spec}, timeout)
        if "error" in prog:
            data["notes"].append(f"{s.name}: all-tasks program load failed: {prog['error']}")
        else:
            entry["all_tasks_program_load_ms"] = prog["load_ms"]
            entry["memory_rss_bytes"]["model_all_tasks_program"] = \
                prog["rss"] - prog["rss_after_import"]
    say(f"{s.name}: load {entry.get('load_ms', {}).get(s.runtime, float('nan')):.1f} ms"
        + (f", error: {entry['error']}" if "error" in entry else ""))
    data["subjects"][s.name] = entry


def load_entry(s: Subject, loads: list[dict[str, Any]]) -> dict[str, Any]:
    """The subject entry's load, swap and memory figures from its load workers' results: the
    median of each time (per task for swaps), the memory of the first; every process's result
    kept under load_detail's "repeats"."""
    load = {**loads[0], "repeats": loads}
    for key in ("load_ms", "first_run_ms"):
        load[key] = statistics.median(r[key] for r in loads)
    for key in ("swap_ms", "first_run_after_swap_ms"):
        load[key] = {t: statistics.median(r[key][t] for r in loads) for t in loads[0][key]}
    entry = {"load_ms": {s.runtime: load["load_ms"]},
             "first_result_ms": {s.runtime: load["load_ms"] + load["first_run_ms"]},
             **swap_and_memory(s.runtime, load["swap_ms"], load["first_run_after_swap_ms"],
                               load["rss_after_import"], load["rss_one_task"],
                               load["rss_all_tasks"]),
             "load_detail": load}
    entry["memory_rss_bytes"].update(peak_one_task=load["peak_rss_one_task"],
                                     peak_all_tasks=load["peak_rss_all_tasks"])
    return entry


def latency_spec(subject: dict[str, Any], configs: list[str], t: LatencyBudget) -> dict[str, Any]:
    """A latency worker's spec, but for its thread count and sequence length."""
    return {"mode": "latency", "subject": subject, "configs": configs, "warmup": t.warmup,
            "runs": t.min_runs, "min_seconds": t.min_seconds, "max_seconds": t.max_seconds,
            "block": t.block}


def p50s(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{row['config']}={row['p50_ms']:.2f}ms" if row["p50_ms"] is not None
                     else f"{row['config']}=failed" for row in rows)


def record_latency(job: Job, data: dict[str, Any], o: BenchOptions) -> None:
    """p50/p90 of each task and of all tasks on one input, timed in interleaved rounds of blocks."""
    s, n, seq = job.subject, job.threads, job.seq_len
    configs = [f"task:{t}" for t in s.tasks] + (["all_tasks"] if len(s.tasks) > 1 else [])
    r = run_worker({**latency_spec(s.worker_subject(), configs, o.timing), "threads": n,
                    "seq_len": seq}, o.worker_timeout)
    rows = r.get("rows") or [{"config": c, "p50_ms": None, "p90_ms": None, "runs": 0,
                              "error": r.get("error", "no result")} for c in configs]
    sequential = any(row.get("all_tasks_mode") == "sequential" for row in rows) \
        or s.all_tasks is None
    flops = subject_flops(s, seq, sequential)
    data["flops"].setdefault(s.name, {})[str(seq)] = flops
    for row in rows:
        row.update(subject=s.name, runtime=s.runtime, threads=n, seq_len=seq,
                   precision=s.precision, worker_load_avg=r.get("load_avg_1min"),
                   id=latency_id(s.name, row["config"], n, seq),
                   matmul_flops=flops.get(row["config"]), round=job.round)
        data["results"].append(row)
    say(f"{s.name} threads={n} seq={seq}" + (f" (round {job.round + 1})" if job.round else "")
        + f": {p50s(rows)}")


def record_native_path(job: Job, data: dict[str, Any], o: BenchOptions) -> None:
    """The app's own C++ path (JNI over ExecuTorch's Module) on a PAL bundle's ExecuTorch files:
    its latency rows and, once, its load and memory as a subject of its own."""
    from palkit.bench.native import NativePathError, measure_native, native_subject_entry

    s = job.subject
    name = s.name.replace("/executorch", "/executorch-cpp")
    try:
        r = measure_native(s.extra["bundle_dir"], job.seq_len, job.threads, o.timing.min_runs,
                           o.timing.warmup, o.worker_timeout, s.trust_key)
    except NativePathError as e:
        data["notes"].append(f"{name}: not measured: {e}")
        say(f"{name}: not measured: {e}")
        return
    data["subjects"].setdefault(name, native_subject_entry(data["subjects"][s.name], r))
    for row in r["rows"]:
        row.update(subject=name, runtime="executorch-cpp", threads=job.threads,
                   seq_len=job.seq_len, precision=s.precision,
                   id=latency_id(name, row["config"], job.threads, job.seq_len))
        data["results"].append(row)
    say(f"{name} threads={job.threads} seq={job.seq_len}: {p50s(r['rows'])}")


RECORD = {"ceiling": record_ceiling, "load": record_load, "latency": record_latency,
          "native": record_native_path}


# ---- accuracy ----------------------------------------------------------------------------------

def evaluate_accuracy(subjects: list[Subject], runs: list[Path], data_dir: Path, splits: list[str],
                      max_examples: int | None) -> tuple[dict[str, Any], list[str]]:
    """Bundles as their runtime runs them and training runs in fp32 PyTorch (trainer/scoring.py)."""
    notes: list[str] = []
    acc: dict[str, Any] = {}
    jobs = [(s, None, split) for s in subjects if s.role != "peer" for split in splits] + \
           [(None, run, split) for run in runs for split in splits]
    for s, run, split in track(jobs, "bench: accuracy"):
        try:
            if s is not None:
                acc.setdefault(s.name, {})[split] = bundle_accuracy(s, data_dir, split,
                                                                    max_examples, notes)
            else:
                scores = run_accuracy(run, subjects, data_dir, split, max_examples, notes)
                acc.setdefault(f"fp32:{Path(run).name}", {}).update(
                    {split: scores, "run": str(run), "optimizer_steps": optimizer_steps(run),
                     "kind": "separate" if separate_models(run) else "joint"})
        except (PalkitError, RuntimeError) as e:  # say it, go on with the others
            what = s.name if s is not None else f"fp32 {run}"
            notes.append(f"accuracy of {what} on {split} failed: {e}".splitlines()[0])
    return acc, notes


def bundle_accuracy(s: Subject, data_dir: Path, split: str, max_examples: int | None,
                    notes: list[str]) -> dict[str, Any]:
    """A subject's tasks scored from its bundle(s) as its runtime runs them, and their average
    over the tasks that have `split` (CFIMDB has no test split), said in a note when not all;
    each task's predictions and gold labels kept under "examples". Set and tagging tasks on the
    same texts from separate bundles (an intent model and a slot model) are also scored
    together (sentence accuracy)."""
    from palkit.export.evaluate import evaluate_bundle  # looked up per call: tests replace it

    merged: dict[str, Any] = {"examples": {}}
    named: list[TaskSpec] = []
    for b in sorted({src["bundle"] for src in s.tasks.values()}):
        r = evaluate_bundle(Path(b), data_dir, split, max_examples, s.runtime, s.trust_key,
                            keep_predictions=True)
        merged.update({k: v for k, v in r.items() if isinstance(v, (int, float)) and k != "avg"})
        merged["examples"].update(r["examples"])  # for the report's paired accuracy gap
        # set and tagging tasks predict label names or tags per text (lists)
        listed = {t for t, e in r["examples"].items() if e["pred"] and isinstance(e["pred"][0], list)}
        if listed:
            named += [TaskSpec.from_dict(t.spec) for t in read_manifest(b).tasks if t.name in listed]
    merged.update(sentence_metrics(named, {t.name: (merged["examples"][t.name]["pred"],
                                                    merged["examples"][t.name]["gold"])
                                           for t in named}))
    if not all(t in BUILTIN_TASKS for t in s.tasks):
        return merged
    scored = [t for t in s.tasks if any(k.startswith(f"{t}_") for k in merged)]
    if scored:
        merged["avg"] = average_score([BUILTIN_TASKS[t] for t in scored], merged)
    if len(scored) < len(s.tasks):
        notes.append(f"accuracy of {s.name} on {split}: avg over {sorted(scored)}; "
                     f"{sorted(set(s.tasks) - set(scored))} have no {split} split")
    return merged


def optimizer_steps(run: Path) -> int | None:
    """The training budget of a run: optimizer steps over its finished epochs (a separate run:
    over all its models); None when its records cannot be read."""
    try:
        return sum(len(read_metrics(m)) * int(read_run_config(m)["steps_per_epoch"])
                   for m in separate_models(run) or [Path(run)])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def run_accuracy(run: Path, subjects: list[Subject], data_dir: Path, split: str,
                 max_examples: int | None, notes: list[str]) -> dict[str, Any]:
    """A training run in fp32 PyTorch, averaged over the tasks the benchmarked bundles have."""
    from palkit.trainer.scoring import score_run

    r = score_run(Path(run), data_dir, split, None, max_examples)
    # Compare like with like: a run that also holds tasks no benchmarked bundle has (e.g. one
    # added later with add-task) is averaged over the bundled tasks only.
    bundled = {t for s in subjects for t, info in s.models.items()
               if Path(run).resolve() in Path(info.model_dir).resolve().parents}
    extra = set(r.get("tasks", [])) - bundled
    if bundled and extra and all(t in BUILTIN_TASKS for t in bundled):
        r["avg"] = average_score([BUILTIN_TASKS[t] for t in sorted(bundled)], r)
        note = (f"fp32 accuracy of {run}: avg over the benchmarked tasks "
                f"{sorted(bundled)}, not {sorted(extra)}")
        if note not in notes:  # once, not once per split
            notes.append(note)
    return {k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# ---- the bench ---------------------------------------------------------------------------------

def check_signatures(bundles: list[Path], key: Path | None) -> None:
    """With a trusted key, each bundle (or each one in a folder of bundles) must carry its
    signature, checked before any worker, runtime or the app's native path opens one: every
    path of `bench` refuses the same bundles. The workers and the JVM check again as they load."""
    if key is None:
        return
    for given in map(Path, bundles):
        inner = sorted(m.parent for m in given.glob(f"*/{MANIFEST_FILE}"))
        for folder in [given] if (given / MANIFEST_FILE).is_file() or not inner else inner:
            verify_bundle_signature(folder, key)


def bench(bundles: list[Path], runs: list[Path], out: Path,
          options: BenchOptions) -> dict[str, Any]:
    """Measure what `options` ask on this machine; write the bench file `out` and return it."""
    o = options
    key = resolve_trust_key(o.trust_key)
    check_signatures(bundles, key)
    started = time.time()
    machine = host_machine()
    say(f"host: {machine['model']}, {machine['cores_logical']} logical cores, "
        f"load average {machine['load_avg_1min_at_start']:.1f}")
    subjects, _, notes = discover(bundles, runs, o.runtimes, o.peers, o.work)
    for s in subjects:
        s.trust_key = key
    if not subjects:
        raise BenchError("nothing to measure: give bundles, or --run a `--mode separate` run "
                         "for the peers")
    data = new_bench_data(machine, notes, o)
    jobs = plan(subjects, o.threads, o.seq_lens, o.ceiling, o.native, o.rounds)
    for job in track(jobs, "bench"):
        RECORD[job.kind](job, data, o)
    time_pairs(subjects, data, o, run_worker)
    data["results"] = merge_rounds(data["results"])
    if o.splits and o.data_dir is None:
        notes.append("accuracy skipped: no data directory")
    elif o.splits:
        data["accuracy"], acc_notes = evaluate_accuracy(subjects, runs, o.data_dir, o.splits,
                                                        o.max_examples)
        notes.extend(acc_notes)
        data["settings"]["accuracy"] = {"splits": o.splits, "max_examples": o.max_examples,
                                        "data_dir": str(o.data_dir)}
    data["finished_s"] = time.time() - started
    data["machine"]["load_avg_1min_at_end"] = os.getloadavg()[0]
    write_bench_file(data, out)
    say(f"wrote {out} in {data['finished_s']:.0f} s")
    return data


def plan(subjects: list[Subject], threads: list[int], seq_lens: list[int], ceiling: bool,
         native: bool, rounds: int = 1) -> list[Job]:
    """The ceiling per thread count, then per subject its load and each latency condition, and
    for a PAL bundle's ExecuTorch files the app's native path in the same conditions. Latency
    runs in `rounds` passes over all subjects, each pass starting one subject later: one
    process's figures moved by up to 7% between bench runs, so a subject's figure is the median
    of its processes, and no subject is always the one measured first."""
    jobs = [Job("ceiling", n, 0) for n in threads] if ceiling else []
    for s in subjects:
        jobs.append(Job("load", min(threads), max(seq_lens), s))
        if native and s.role == "pal" and s.runtime == "executorch":
            jobs += [Job("native", n, seq, s) for n in threads for seq in seq_lens]
    for r in range(rounds):
        order = subjects[r % len(subjects):] + subjects[:r % len(subjects)]
        jobs += [Job("latency", n, seq, s, r) for s in order for n in threads for seq in seq_lens]
    return jobs


def merge_rounds(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per latency id over the rounds that did not fail: p50 and p90 their medians,
    every round's p50 kept, min and mean over all their calls, the highest load seen; an id with
    no good round keeps its first row's error."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for row in results:
        by_id.setdefault(row["id"], []).append(row)
    merged = []
    for rows in by_id.values():
        good = [r for r in rows if r.get("p50_ms") is not None]
        if len(rows) == 1 or not good:
            merged.append({k: v for k, v in rows[0].items() if k != "round"})
            continue
        row = {k: v for k, v in good[0].items() if k != "round"}
        runs = sum(r["runs"] for r in good)
        loads = [r["worker_load_avg"] for r in good if r.get("worker_load_avg") is not None]
        row.update(p50_ms=statistics.median(r["p50_ms"] for r in good),
                   p90_ms=statistics.median(r["p90_ms"] for r in good),
                   min_ms=min(r["min_ms"] for r in good),
                   mean_ms=sum(r["mean_ms"] * r["runs"] for r in good) / runs, runs=runs,
                   worker_load_avg=max(loads, default=None),
                   p50_ms_rounds=[r["p50_ms"] for r in good])
        merged.append(row)
    return merged


def command_line() -> list[str] | None:
    """The command that produced the file, as `palkit ...` whether typed as `palkit` or as
    `python cli.py`; None when the bench is called from Python."""
    return ["palkit", *sys.argv[1:]] if Path(sys.argv[0]).name in ("palkit", "cli.py") else None


def new_bench_data(machine: dict[str, Any], notes: list[str], o: BenchOptions) -> dict[str, Any]:
    """The bench file before any measurement: the machine, the settings, empty tables."""
    return {
        "schema": SCHEMA, "version": VERSION, "machine": machine,
        "bundle": {}, "results": [], "load_ms": {}, "swap_ms": {}, "memory_rss_bytes": {},
        "subjects": {}, "flops": {}, "ceiling": {}, "accuracy": {}, "pairs": {}, "notes": notes,
        "command": command_line(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {"threads": o.threads, "seq_lens": o.seq_lens, **asdict(o.timing),
                     "rounds": o.rounds,
                     "isolation": "one process per (subject, threads, seq_len) and round for "
                                  "latency (the median over rounds reported; its "
                                  "configurations timed in interleaved rounds of blocks of calls, "
                                  "each block's first call untimed), three per subject for "
                                  "load/swap/memory (median times, the first one's memory), one "
                                  "per thread count for the ceiling, and for the ratios the "
                                  f"verdict quotes at least {o.timing_plan.min_processes} per "
                                  "runtime (more while an interval is wide: timing_plan), each "
                                  "timing that runtime's ratios, a ratio's two sides in "
                                  f"alternating blocks ({o.timing_plan.pairs} pairs of "
                                  f"{o.timing.block}-call blocks, each block's first call "
                                  "untimed)",
                     "input": "synthetic, every token attended, pair layout (types 0 then 1)"},
    }


# a list of numbers as json.dumps(indent=1) writes it, one number a line: only a list spans
# lines (a string cannot: JSON escapes its newlines), so no string's text is touched
NUMBER_LIST = re.compile(r"\[\n\s*(-?[\d.eE+-]+(?:,\n\s*-?[\d.eE+-]+)*)\n\s*\]")


def bench_json(data: dict[str, Any]) -> str:
    """Indented for reading, with each list of numbers (block timings, predictions, gold labels)
    on one line: one number a line would double the file."""
    return NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m[1].split(",")) + "]",
                           json.dumps(data, indent=1, sort_keys=True, default=str)) + "\n"


def write_bench_file(data: dict[str, Any], out: Path) -> None:
    """Validate, then write atomically; an invalid file is a bug here, not the user's input, so
    the measurements are kept beside it."""
    try:
        validate(data)
    except ValueError as e:
        kept = out.with_name(out.stem + ".invalid.json")
        write_text(kept, bench_json(data))
        raise BenchFileError(f"bench produced an invalid file ({e}); the measurements are in "
                             f"{kept} (please report this)") from None
    write_text(out, bench_json(data))
