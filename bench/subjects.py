"""What `palkit bench` measures: subjects found from bundles, training runs and peers.

A subject is a set of task models run by one runtime: each multi-task bundle per runtime (a PAL
bundle), the single-task bundles grouped per runtime and precision ("the separate models"), and
each peer built from the separately fine-tuned models of a `--mode separate` run.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palkit.bench.schema import ALL_TASKS, BenchError
from palkit.core.fileio import sha256_file, write_json
from palkit.export.arch_records import cpu_checks
from palkit.runtime.manifest import Manifest, read_manifest
from palkit.trainer.checkpoint import TRUNK_WEIGHTS, read_json, resolve_model_dir, separate_models
from palkit.trainer.tasks import TaskSpec
from palkit.ui.progress import say


@dataclass
class ModelInfo:
    """A trained model folder: the fp32 reference for a bundle or a peer, and its shapes."""
    model_dir: Path
    bert: dict[str, Any]
    pal: dict[str, Any] | None
    tasks: dict[str, int]  # task -> num_outputs


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
    pal_layers: tuple[int, ...] = ()  # the trunk layers with a PAL (the report names them)
    num_layers: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    trust_key: Path | None = None   # bundles are refused unless signed by it

    def worker_subject(self) -> dict[str, Any]:
        return {"name": self.name, "runtime": self.runtime, "vocab_size": self.vocab_size,
                "tasks": self.tasks, "all_tasks": self.all_tasks,
                "trust_key": None if self.trust_key is None else str(self.trust_key)}


def model_info(model_dir: Path) -> ModelInfo:
    d = resolve_model_dir(model_dir)
    bert = read_json(d / "trunk" / "config.json")
    tasks, pal = {}, None
    for cfg_path in sorted((d / "tasks").glob("*/adapter_config.json")):
        cfg = read_json(cfg_path)
        tasks[cfg["task"]["name"]] = TaskSpec.from_dict(cfg["task"]).num_outputs
        pal = cfg.get("pal")
    return ModelInfo(d, bert, pal, tasks)


def bundle_sizes(bundle: Path, m: Manifest, runtime: str) -> dict[str, Any]:
    """Bytes of the trunk, each task's file, the all-tasks program (its own file over the
    trunk's weights) and the vocabulary, as the manifest lists them."""
    adapters = {t.name: m.files[t.files[runtime]].bytes for t in m.tasks}
    program = m.all_tasks(runtime)
    all_tasks = [program.file] if program is not None else []
    out: dict[str, Any] = {
        "trunk_bytes": sum(m.files[rel].bytes for rel in m.runtimes[runtime].runtime_files
                           if rel not in all_tasks),
        "adapter_bytes": adapters, "vocab_bytes": m.files[m.tokenizer.vocab_file].bytes}
    if program is not None:
        out["all_tasks_program_bytes"] = m.files[program.file].bytes
    out["total_bytes"] = (out["trunk_bytes"] + sum(adapters.values())
                          + out.get("all_tasks_program_bytes", 0))
    return out


@dataclass
class _Single:
    """A single-task bundle, waiting to be grouped with the others of its runtime."""
    bundle: Path
    sizes: dict[str, Any]
    info: ModelInfo | None
    vocab_size: int


def discover(bundles: list[Path], runs: list[Path], runtimes: list[str], peers: list[str],
             work: Path) -> tuple[list[Subject], dict[str, ModelInfo], list[str]]:
    """The subjects to measure, the runs' model folders by path, and notes for the report."""
    notes: list[str] = []
    by_sha: dict[str, ModelInfo] = {}
    run_models: dict[str, ModelInfo] = {}
    for run in runs:
        if not Path(run).exists():
            raise BenchError(f"{run}: run directory not found")
        # RUN/model, or RUN/models/<task>/model for --mode separate
        for d in [resolve_model_dir(p) for p in separate_models(run)] or [resolve_model_dir(run)]:
            info = model_info(d)
            by_sha[sha256_file(d / "trunk" / TRUNK_WEIGHTS)] = info
            run_models[str(d)] = info
    subjects: list[Subject] = []
    singles: dict[tuple[str, str], dict[str, _Single]] = {}
    for bundle in bundles:
        m = read_manifest(bundle)
        info = by_sha.get(m.trunk.sha256)
        if info is None and runs:
            notes.append(f"{bundle}: no --run has its trunk (sha256 {m.trunk.sha256[:12]}); "
                         "FLOPs and its fp32 reference are unknown")
        subjects += _bundle_subjects(Path(bundle), m, info, runtimes, singles, notes)
    subjects += [_separate_subject(rt, prec, group) for (rt, prec), group in singles.items()]
    separate = {next(iter(i.tasks)): i for i in run_models.values()
                if not i.pal and len(i.tasks) == 1}
    if not separate:
        notes.append("no separately fine-tuned models among --run, so neither the separate "
                     "models nor the peers were measured; to compare against them: `palkit train "
                     "--mode separate --out runs/separate`, `palkit export runs/separate --out "
                     "bundles/separate`, then bench again adding `bundles/separate/* --run "
                     "runs/separate`")
    elif not singles:
        notes.append("the separate models' bundles were not given, so they were measured only "
                     "as peers; to time them on the bundle's runtimes: `palkit export "
                     "runs/separate --out bundles/separate` and add `bundles/separate/*`")
    subjects += [build_peer_subject(peer, separate, work) for peer in peers if separate]
    return subjects, run_models, notes


def _bundle_subjects(bundle: Path, m: Manifest, info: ModelInfo | None, runtimes: list[str],
                     singles: dict[tuple[str, str], dict[str, _Single]],
                     notes: list[str]) -> list[Subject]:
    """One PAL subject per runtime of a multi-task bundle; a single-task bundle joins `singles`."""
    with open(bundle / m.tokenizer.vocab_file) as f:
        vocab = sum(1 for _ in f)
    names, prec, out = m.task_names, str(m.quantization.get("scheme") or "fp32"), []
    for rt in [r for r in runtimes if r in m.runtime_names]:
        sizes = bundle_sizes(bundle, m, rt)
        if len(names) == 1:
            group = singles.setdefault((rt, prec), {})
            if names[0] in group:
                raise BenchError(f"{bundle}: a second single-task bundle for "
                                 f"'{names[0]}' ({group[names[0]].bundle})")
            group[names[0]] = _Single(bundle, sizes, info, vocab)
            continue
        program = m.all_tasks(rt)
        all_tasks = None
        # the program's tasks are grouped by placement; the manifest lists them as added
        if program is not None and sorted(program.tasks) == sorted(names):
            all_tasks = {"format": "bundle", "bundle": str(bundle), "task": ALL_TASKS}
        elif program is not None:
            notes.append(f"{bundle}: its all-tasks program covers {program.tasks}, "
                         f"not all of {names}; all tasks run one after the other")
        pal = info.pal if info else m.trunk.pal
        out.append(Subject(
            name=f"{bundle.name}/{rt}", role="pal", runtime=rt, precision=prec,
            label=f"{bundle.name} ({rt}, {prec})",
            tasks={t: {"format": "bundle", "bundle": str(bundle), "task": t} for t in names},
            models={t: info for t in names} if info else {}, sizes=sizes, vocab_size=vocab,
            all_tasks=all_tasks, pal_layers=tuple(sorted(pal["layers"])) if pal else (),
            num_layers=m.trunk.num_layers,
            extra={"bundle_dir": str(bundle), "quantization": m.quantization,
                   "pal_heads": int(pal["heads"]) if pal else None,
                   "task_adapters": {t: m.adapter(t) for t in names},
                   "architectures": cpu_checks(bundle, rt)}))
    return out


def _separate_subject(rt: str, prec: str, group: dict[str, _Single]) -> Subject:
    """The single-task bundles of one runtime and precision, measured as one subject."""
    sizes: dict[str, Any] = {
        "trunk_bytes": {t: s.sizes["trunk_bytes"] for t, s in group.items()},
        "adapter_bytes": {t: s.sizes["adapter_bytes"][t] for t, s in group.items()},
        "per_model_bytes": {t: s.sizes["total_bytes"] for t, s in group.items()}}
    sizes["total_bytes"] = sum(sizes["per_model_bytes"].values())
    return Subject(
        name=f"separate/{rt}/{prec}", role="separate", runtime=rt, precision=prec,
        label=f"separate models ({rt}, {prec})",
        tasks={t: {"format": "bundle", "bundle": str(s.bundle), "task": t}
               for t, s in group.items()},
        models={t: s.info for t, s in group.items() if s.info}, sizes=sizes,
        vocab_size=next(iter(group.values())).vocab_size,
        extra={"bundles": {t: str(s.bundle) for t, s in group.items()}})


def build_peer_subject(peer: str, separate: dict[str, ModelInfo], work: Path) -> Subject:
    """A peer built (or reused from `work`, keyed by the trunk's hash) from each separate model."""
    from palkit.bench import peers as P

    tasks, sizes = {}, {"per_model_bytes": {}}
    for task, info in separate.items():
        if peer == "torch":  # what a PyTorch deployment ships: trunk and head weights
            d = resolve_model_dir(info.model_dir)
            tasks[task] = {"format": "torch", "model_dir": str(d)}
            files = [d / "trunk" / TRUNK_WEIGHTS,
                     *sorted((d / "tasks").glob("*/adapter.safetensors"))]
        else:
            tasks[task] = _built_peer(peer, task, info, work / "peers" / peer / task)
            files = [Path(tasks[task]["path"])]
        sizes["per_model_bytes"][task] = sum(f.stat().st_size for f in files)
    sizes["total_bytes"] = sum(sizes["per_model_bytes"].values())
    any_info = next(iter(separate.values()))
    return Subject(name=f"peer/{peer}", role="peer", runtime=P.PEER_RUNTIME[peer],
                   precision="fp32" if peer == "torch" else "int8", label=P.PEER_LABEL[peer],
                   tasks=tasks, models=dict(separate), sizes=sizes,
                   vocab_size=int(any_info.bert["vocab_size"]))


def _built_peer(peer: str, task: str, info: ModelInfo, out: Path) -> dict[str, Any]:
    from palkit.bench import peers as P

    marker = out / "source.json"
    stamp = sha256_file(info.model_dir / "trunk" / TRUNK_WEIGHTS)
    cached = json.loads(marker.read_text()) if marker.is_file() else {}
    if cached.get("trunk_sha256") == stamp and Path(cached["source"]["path"]).is_file():
        say(f"peer {peer}/{task}: reusing {cached['source']['path']}")
        return cached["source"]
    say(f"peer {peer}/{task}: building from {info.model_dir}")
    t0 = time.time()
    source = P.BUILDERS[peer](info.model_dir, out)
    write_json(marker, {"trunk_sha256": stamp, "source": source, "build_s": time.time() - t0})
    return source
