"""`cli.py bench`: measure bundles, the three separate models and the peers on this machine.

Plan: find the subjects (each multi-task bundle per runtime; the single-task bundles grouped
into "separate" per runtime; each peer built from the separately fine-tuned models), then start
one worker process per (subject, threads, sequence length) for latency, one per subject for
load / swap / memory, and one per thread count for the matmul ceiling. Accuracy of the bundles
(as the runtime runs them) and fp32 PyTorch accuracy of the training runs are measured last.
Everything lands in one palkit-bench JSON (bench/schema.py).
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.flops import model_flops
from bench.machine import host_machine
from bench.schema import SCHEMA, VERSION, BenchFileError, validate
from trainer.checkpoint import CheckpointError, read_json, resolve_model_dir, sha256_file
from trainer.errors import PalkitError

ROOT = Path(__file__).resolve().parent.parent
BUNDLE_RUNTIMES = ("executorch", "onnxruntime")
TRUNK_KEY = {"executorch": "trunk_data", "onnxruntime": "trunk_model"}


class BenchError(PalkitError, ValueError):
    """A bundle or run given to `cli.py bench` cannot be benchmarked."""


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- what is measured ------------------------------------------------------------------------

@dataclass
class ModelInfo:
    """A trained model folder: the fp32 reference for a bundle or a peer, and its shapes."""
    model_dir: Path
    bert: dict[str, Any]
    pal: dict[str, Any] | None
    tasks: dict[str, int]  # task -> num_outputs

    @property
    def pal_layers(self) -> str:
        if not self.pal:
            return "none"
        n = int(self.bert["num_hidden_layers"])
        layers = sorted(self.pal["layers"])
        if layers == list(range(n)):
            return "all"
        if layers == list(range(n // 2, n)):
            return "top"
        if layers == list(range(n // 2)):
            return "bottom"
        return ",".join(map(str, layers))


@dataclass
class Subject:
    name: str
    role: str                       # pal | separate | peer
    runtime: str                    # executorch | onnxruntime | torch
    precision: str                  # int8 | fp32 | ...
    label: str
    tasks: dict[str, dict[str, Any]]
    models: dict[str, ModelInfo]    # task -> the fp32 model it came from (for FLOPs)
    sizes: dict[str, Any]
    vocab_size: int
    all_tasks: dict[str, Any] | None = None
    pal_layers: str = "none"
    extra: dict[str, Any] = field(default_factory=dict)

    def worker_subject(self) -> dict[str, Any]:
        return {"name": self.name, "runtime": self.runtime, "vocab_size": self.vocab_size,
                "tasks": self.tasks, "all_tasks": self.all_tasks}


def model_info(model_dir: Path) -> ModelInfo:
    d = resolve_model_dir(model_dir)
    bert = read_json(d / "trunk" / "config.json")
    tasks, pal = {}, None
    for cfg_path in sorted((d / "tasks").glob("*/adapter_config.json")):
        cfg = read_json(cfg_path)
        spec = cfg["task"]
        tasks[spec["name"]] = 1 if spec["kind"] == "pair_regression" else len(spec["labels"])
        pal = cfg.get("pal")
    return ModelInfo(d, bert, pal, tasks)


def run_model_dirs(run: Path) -> list[Path]:
    """A run's model folders: RUN/model, or RUN/models/<task>/model for --mode separate."""
    run = Path(run)
    if not run.exists():
        raise BenchError(f"{run}: run directory not found")
    if (run / "models").is_dir() and not (run / "model").exists():
        return [resolve_model_dir(p) for p in sorted((run / "models").iterdir()) if p.is_dir()]
    return [resolve_model_dir(run)]


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = Path(bundle) / "manifest.json"
    if not path.is_file():
        raise BenchError(f"{bundle}: not a bundle (no manifest.json); make one with "
                         "`python cli.py export`")
    try:
        m = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BenchError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if m.get("format") != "palkit-bundle" or m.get("version") != 1:
        raise BenchError(f"{path}: not a palkit-bundle version 1 manifest")
    return m


def bundle_sizes(bundle: Path, manifest: dict[str, Any], runtime: str) -> dict[str, Any]:
    files = manifest.get("files", {})

    def size(rel: str) -> int:
        if rel in files and "bytes" in files[rel]:
            return int(files[rel]["bytes"])
        return (Path(bundle) / rel).stat().st_size

    trunk_rel = manifest["runtimes"][runtime][TRUNK_KEY[runtime]]
    adapters = {t["name"]: size(t["files"][runtime]) for t in manifest["tasks"]}
    extra = manifest["runtimes"][runtime].get("all_tasks")
    out = {"trunk_bytes": size(trunk_rel), "adapter_bytes": adapters,
           "vocab_bytes": size(manifest["tokenizer"]["vocab_file"])}
    out["total_bytes"] = out["trunk_bytes"] + sum(adapters.values())
    if isinstance(extra, dict):
        out["all_tasks_program_bytes"] = size(extra["file"])
    return out


def _precision(manifest: dict[str, Any]) -> str:
    return str(manifest.get("quantization", {}).get("scheme") or "fp32")


def discover(bundles: list[Path], runs: list[Path], runtimes: list[str], peers: list[str],
             work: Path) -> tuple[list[Subject], dict[str, ModelInfo], list[str]]:
    notes: list[str] = []
    by_sha: dict[str, ModelInfo] = {}
    run_models: dict[str, ModelInfo] = {}
    for run in runs:
        for d in run_model_dirs(run):
            info = model_info(d)
            by_sha[sha256_file(d / "trunk" / "model.safetensors")] = info
            run_models[str(d)] = info
    subjects: list[Subject] = []
    singles: dict[tuple[str, str], dict[str, tuple[Path, dict[str, Any]]]] = {}
    for bundle in bundles:
        manifest = read_manifest(bundle)
        info = by_sha.get(manifest["trunk"]["sha256"])
        if info is None and runs:
            notes.append(f"{bundle}: no --run has its trunk (sha256 {manifest['trunk']['sha256'][:12]}); "
                         "FLOPs and its fp32 reference are unknown")
        vocab = sum(1 for _ in open(Path(bundle) / manifest["tokenizer"]["vocab_file"]))
        task_names = [t["name"] for t in manifest["tasks"]]
        for rt in runtimes:
            if rt not in manifest.get("runtimes", {}):
                continue
            sizes = bundle_sizes(bundle, manifest, rt)
            tasks = {t: {"format": "bundle", "bundle": str(bundle), "task": t} for t in task_names}
            if len(task_names) == 1:
                group = singles.setdefault((rt, _precision(manifest)), {})
                if task_names[0] in group:
                    raise BenchError(f"{bundle}: a second single-task bundle for "
                                     f"'{task_names[0]}' ({group[task_names[0]][0]})")
                group[task_names[0]] = (Path(bundle), sizes)
                group[task_names[0]][1]["_info"] = info  # type: ignore[index]
                continue
            program = manifest["runtimes"][rt].get("all_tasks")
            all_tasks = None
            if isinstance(program, dict) and list(program.get("tasks", [])) == task_names:
                all_tasks = {"format": "bundle", "bundle": str(bundle), "task": "__all__",
                             "file": program["file"]}
            elif program:
                notes.append(f"{bundle}: its all-tasks program covers {program.get('tasks')}, "
                             f"not all of {task_names}; all tasks run one after the other")
            pal_layers = info.pal_layers if info else manifest.get("pal", {}).get("layers", "unknown")
            name = f"{Path(bundle).name}/{rt}"
            subjects.append(Subject(
                name=name, role="pal", runtime=rt, precision=_precision(manifest),
                label=f"{Path(bundle).name} ({rt}, {_precision(manifest)})", tasks=tasks,
                models={t: info for t in task_names} if info else {}, sizes=sizes,
                vocab_size=vocab, all_tasks=all_tasks, pal_layers=str(pal_layers),
                extra={"bundle_dir": str(bundle), "quantization": manifest.get("quantization")}))
    for (rt, prec), group in singles.items():
        sizes = {"trunk_bytes": {t: s["trunk_bytes"] for t, (_, s) in group.items()},
                 "adapter_bytes": {t: s["adapter_bytes"][t] for t, (_, s) in group.items()}}
        sizes["per_model_bytes"] = {t: s["total_bytes"] for t, (_, s) in group.items()}
        sizes["total_bytes"] = sum(sizes["per_model_bytes"].values())
        first = next(iter(group.values()))[0]
        vocab = sum(1 for _ in open(first / "vocab.txt")) if (first / "vocab.txt").is_file() else 30522
        models = {t: s["_info"] for t, (_, s) in group.items() if s.get("_info")}
        subjects.append(Subject(
            name=f"separate/{rt}/{prec}", role="separate", runtime=rt, precision=prec,
            label=f"separate models ({rt}, {prec})",
            tasks={t: {"format": "bundle", "bundle": str(b), "task": t} for t, (b, _) in group.items()},
            models=models, sizes=sizes, vocab_size=vocab,
            extra={"bundles": {t: str(b) for t, (b, _) in group.items()}}))
    separate = {next(iter(i.tasks)): i for i in run_models.values() if not i.pal and len(i.tasks) == 1}
    if peers and not separate:
        notes.append("no separately fine-tuned models among --run (a `--mode separate` run): "
                     "peers were not measured")
    for peer in peers if separate else []:
        subjects.append(build_peer_subject(peer, separate, work))
    return subjects, run_models, notes


def build_peer_subject(peer: str, separate: dict[str, ModelInfo], work: Path) -> Subject:
    from bench import peers as P

    tasks, sizes = {}, {"per_model_bytes": {}}
    for task, info in separate.items():
        if peer == "torch":
            tasks[task] = P.torch_source(info.model_dir)
            files = P.torch_files(info.model_dir)
        else:
            out = work / "peers" / peer / task
            marker = out / "source.json"
            stamp = sha256_file(info.model_dir / "trunk" / "model.safetensors")
            cached = json.loads(marker.read_text()) if marker.is_file() else {}
            if cached.get("trunk_sha256") == stamp and Path(cached["source"]["path"]).is_file():
                tasks[task] = cached["source"]
                log(f"peer {peer}/{task}: reusing {cached['source']['path']}")
            else:
                log(f"peer {peer}/{task}: building from {info.model_dir}")
                t0 = time.time()
                tasks[task] = P.BUILDERS[peer](info.model_dir, out)
                marker.write_text(json.dumps({"trunk_sha256": stamp, "source": tasks[task],
                                              "build_s": time.time() - t0}, indent=1))
            files = [Path(tasks[task]["path"])]
        sizes["per_model_bytes"][task] = sum(f.stat().st_size for f in files)
    sizes["total_bytes"] = sum(sizes["per_model_bytes"].values())
    any_info = next(iter(separate.values()))
    return Subject(name=f"peer/{peer}", role="peer", runtime=P.PEER_RUNTIME[peer],
                   precision="fp32" if peer == "torch" else "int8", label=P.PEER_LABEL[peer],
                   tasks=tasks, models=dict(separate), sizes=sizes,
                   vocab_size=int(any_info.bert["vocab_size"]))


# ---- running workers ---------------------------------------------------------------------------

def run_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One fresh `python -m bench.worker` process; its JSON, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="palkit-bench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        # one thread per pool the worker did not ask for; the worker sets its own counts
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(spec.get("threads", 1))
        try:
            proc = subprocess.run([sys.executable, "-m", "bench.worker", str(spec_path),
                                   str(out_path)], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"worker timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not out_path.is_file():
            tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"]
            return {"error": f"worker exit {proc.returncode}: {tail[0][:300]}"}
        return json.loads(out_path.read_text())


def subject_flops(s: Subject, seq: int, sequential_all: bool) -> dict[str, int | None]:
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
        out["all_tasks"] = sum(singles) if all(v is not None for v in singles) else None  # type: ignore
    return out


def evaluate_accuracy(subjects: list[Subject], runs: list[Path], data_dir: Path,
                      splits: list[str], max_examples: int | None) -> tuple[dict[str, Any], list[str]]:
    """Bundles as their runtime runs them (export.runtime.evaluate_bundle) and fp32 runs."""
    from trainer.commands import evaluate_run
    from trainer.metrics import average_score
    from trainer.tasks import BUILTIN_TASKS

    notes: list[str] = []
    acc: dict[str, Any] = {}
    try:
        from export.runtime import evaluate_bundle  # type: ignore
    except ImportError as e:
        evaluate_bundle = None
        notes.append(f"export.runtime.evaluate_bundle is not available ({e}); exported "
                     "artifacts' accuracy was not measured")
    if evaluate_bundle is not None:
        params = inspect.signature(evaluate_bundle).parameters
        for s in subjects:
            if s.role == "peer":
                continue
            bundles = sorted({src["bundle"] for src in s.tasks.values()})
            for split in splits:
                merged: dict[str, Any] = {}
                try:
                    for b in bundles:
                        kwargs = {"runtime": s.runtime} if "runtime" in params else {}
                        log(f"accuracy {s.name} {split} {Path(b).name}")
                        r = evaluate_bundle(Path(b), data_dir, split, max_examples, **kwargs)
                        merged.update({k: v for k, v in r.items() if isinstance(v, (int, float))
                                       and k != "avg"})
                    specs = [BUILTIN_TASKS[t] for t in s.tasks if t in BUILTIN_TASKS]
                    if len(specs) == len(s.tasks):
                        merged["avg"] = average_score(specs, merged)
                    if "runtime" not in params:
                        merged["runtime_note"] = "evaluate_bundle chose the runtime itself"
                    acc.setdefault(s.name, {})[split] = merged
                except Exception as e:  # report, go on with the others
                    notes.append(f"accuracy of {s.name} on {split} failed: {e}".splitlines()[0])
    for run in runs:
        for split in splits:
            log(f"accuracy fp32 {run} {split}")
            try:
                r = evaluate_run(Path(run), data_dir, split, None, max_examples)
            except Exception as e:
                notes.append(f"fp32 accuracy of {run} on {split} failed: {e}".splitlines()[0])
                continue
            # Compare like with like: a run that also holds tasks no benchmarked bundle has
            # (e.g. one added later with add-task) is averaged over the bundled tasks only.
            bundled = {t for s in subjects for t, info in s.models.items()
                       if Path(run).resolve() in Path(info.model_dir).resolve().parents}
            extra = set(r.get("tasks", [])) - bundled
            if bundled and extra and all(t in BUILTIN_TASKS for t in bundled):
                r["avg"] = average_score([BUILTIN_TASKS[t] for t in sorted(bundled)], r)
                note = (f"fp32 accuracy of {run}: avg over the benchmarked tasks "
                        f"{sorted(bundled)}, not {sorted(extra)}")
                if note not in notes:  # once, not once per split
                    notes.append(note)
            acc.setdefault(f"fp32:{Path(run).name}", {})[split] = {
                k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            acc[f"fp32:{Path(run).name}"]["run"] = str(run)
            acc[f"fp32:{Path(run).name}"]["kind"] = (
                "separate" if (Path(run) / "models").is_dir() and not (Path(run) / "model").exists()
                else "joint")
    return acc, notes


def bench(bundles: list[Path], runs: list[Path], out: Path, *, runtimes: list[str],
          peers: list[str], threads: list[int], seq_lens: list[int], warmup: int, min_runs: int,
          min_seconds: float, max_seconds: float, accuracy: bool, splits: list[str],
          data_dir: Path | None, max_examples: int | None, work: Path,
          ceiling: bool = True, worker_timeout: float = 600) -> dict[str, Any]:
    started = time.time()
    machine = host_machine()
    log(f"host: {machine['model']}, {machine['cores_logical']} logical cores, "
        f"load average {machine['load_avg_1min_at_start']}")
    subjects, run_models, notes = discover(bundles, runs, runtimes, peers, work)
    if not subjects:
        raise BenchError("nothing to measure: give bundles, or --run a `--mode separate` run "
                         "for the peers")
    data: dict[str, Any] = {
        "schema": SCHEMA, "version": VERSION, "machine": machine,
        "bundle": {}, "results": [], "load_ms": {}, "swap_ms": {}, "memory_rss_bytes": {},
        "subjects": {}, "flops": {}, "ceiling": {}, "accuracy": {}, "notes": notes,
        "command": ["python", "cli.py", *sys.argv[1:]] if sys.argv[0].endswith("cli.py") else None,
        "settings": {"threads": threads, "seq_lens": seq_lens, "warmup": warmup,
                     "min_runs": min_runs, "min_seconds": min_seconds, "max_seconds": max_seconds,
                     "isolation": "one process per (subject, threads, seq_len) for latency (its "
                                  "configurations timed in interleaved rounds), one "
                                  "per subject for load/swap/memory, one per thread count for "
                                  "the ceiling",
                     "input": "synthetic, every token attended, pair layout (types 0 then 1)"},
    }
    total_jobs = len(subjects) * (1 + len(threads) * len(seq_lens)) + (len(threads) if ceiling else 0)
    done = 0

    def progress(what: str) -> None:
        nonlocal done
        done += 1
        log(f"[{done}/{total_jobs}] {what} ({time.time() - started:.0f} s)")

    if ceiling:
        for n in threads:
            r = run_worker({"mode": "ceiling", "threads": n, "min_seconds": 0.5}, worker_timeout)
            data["ceiling"][str(n)] = r
            progress(f"ceiling, {n} thread(s): fp32 {r.get('fp32_gflops_best', 0):.1f} GFLOP/s, "
                     f"int8 {r.get('int8_gops_best') or 0:.1f} GOP/s")
    for s in subjects:
        entry = {"role": s.role, "runtime": s.runtime, "precision": s.precision, "label": s.label,
                 "pal_layers": s.pal_layers, "tasks": list(s.tasks), "bundle": s.sizes,
                 "all_tasks_program": s.all_tasks is not None,
                 "fp32_model_dirs": {t: str(i.model_dir) for t, i in s.models.items()},
                 "sources": s.tasks, **s.extra}
        load = run_worker({"mode": "load", "threads": min(threads), "seq_len": max(seq_lens),
                           "subject": s.worker_subject()}, worker_timeout)
        if "error" in load:
            entry["error"] = load["error"]
            notes.append(f"{s.name}: load measurement failed: {load['error']}")
        else:
            base = load["rss_after_import"]
            entry["load_ms"] = {s.runtime: load["load_ms"]}
            entry["first_result_ms"] = {s.runtime: load["load_ms"] + load["first_run_ms"]}
            swaps = list(load["swap_ms"].values())
            entry["swap_ms"] = {s.runtime: (sorted(swaps)[len(swaps) // 2] if swaps else None),
                                "per_task": load["swap_ms"],
                                "first_run_after_swap_ms": load["first_run_after_swap_ms"]}
            entry["memory_rss_bytes"] = {
                "after_import": base,
                "one_task": load["rss_one_task"], "all_tasks": load["rss_all_tasks"],
                "peak_one_task": load["peak_rss_one_task"],
                "peak_all_tasks": load["peak_rss_all_tasks"],
                # Current RSS, not the peak: on Linux a forked worker's ru_maxrss starts at the
                # parent's peak, so it would measure this bench process, not the model.
                "model_one_task": load["rss_one_task"] - base,
                "model_all_tasks": load["rss_all_tasks"] - base}
            entry["load_detail"] = load
        if s.all_tasks is not None and "error" not in entry:
            # Every task resident the cheap way: the one program holding the trunk once.
            prog = run_worker({"mode": "load_program", "threads": min(threads),
                               "seq_len": max(seq_lens), "subject": s.worker_subject()},
                              worker_timeout)
            if "error" in prog:
                notes.append(f"{s.name}: all-tasks program load failed: {prog['error']}")
            else:
                entry["all_tasks_program_load_ms"] = prog["load_ms"]
                entry["memory_rss_bytes"]["model_all_tasks_program"] = \
                    prog["rss"] - prog["rss_after_import"]
        progress(f"{s.name}: load {entry.get('load_ms', {}).get(s.runtime, float('nan')):.1f} ms"
                 + (f", error: {entry['error']}" if "error" in entry else ""))
        data["subjects"][s.name] = entry
        configs = [f"task:{t}" for t in s.tasks] + (["all_tasks"] if len(s.tasks) > 1 else [])
        for n in threads:
            for seq in seq_lens:
                r = run_worker({"mode": "latency", "threads": n, "seq_len": seq, "configs": configs,
                                "warmup": warmup, "runs": min_runs, "min_seconds": min_seconds,
                                "max_seconds": max_seconds, "subject": s.worker_subject()},
                               worker_timeout)
                rows = r.get("rows") or [{"config": c, "p50_ms": None, "p90_ms": None, "runs": 0,
                                          "error": r.get("error", "no result")} for c in configs]
                sequential = any(row.get("all_tasks_mode") == "sequential" for row in rows) \
                    or s.all_tasks is None
                flops = subject_flops(s, seq, sequential)
                data["flops"].setdefault(s.name, {})[str(seq)] = flops
                for row in rows:
                    row.update(subject=s.name, runtime=s.runtime, threads=n, seq_len=seq,
                               precision=s.precision, worker_load_avg=r.get("load_avg_1min"))
                    row["id"] = f"latency:{s.name}:{row['config']}:t{n}:s{seq}"
                    row["matmul_flops"] = flops.get(row["config"])
                    data["results"].append(row)
                p50 = {row["config"]: row["p50_ms"] for row in rows}
                progress(f"{s.name} threads={n} seq={seq}: " + ", ".join(
                    f"{c}={v:.2f}ms" if v is not None else f"{c}=failed" for c, v in p50.items()))
    if accuracy:
        if data_dir is None:
            notes.append("accuracy skipped: no data directory")
        else:
            data["accuracy"], acc_notes = evaluate_accuracy(subjects, runs, data_dir, splits,
                                                            max_examples)
            notes.extend(acc_notes)
            data["settings"]["accuracy"] = {"splits": splits, "max_examples": max_examples,
                                            "data_dir": str(data_dir)}
    data["finished_s"] = time.time() - started
    data["machine"]["load_avg_1min_at_end"] = os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        validate(data)
    except ValueError as e:  # a bug here, not the user's input; keep the measurements anyway
        kept = out.with_name(out.stem + ".invalid.json")
        kept.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
        raise BenchFileError(f"bench produced an invalid file ({e}); the measurements are in "
                             f"{kept} (please report this)") from None
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    log(f"wrote {out} in {data['finished_s']:.0f} s")
    return data
