"""`palkit bench-train`: how fast the trainer trains a config, and where a step's time goes.

It builds the same Run as `palkit train` and times the joint phase's first steps through the
training loop's own Run.batch and TrainStep, without dev scoring or checkpoints. cpu_s / wall_s
shows how many cores the step kept busy; on a GPU, CPU seconds close to wall seconds mean the
host's kernel launches bound it. On CUDA the section shares need a synchronisation at each
boundary, which slows the step, so there the throughput comes from a separate pass without them.
"""
from __future__ import annotations

import datetime
import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from palkit.core.fileio import write_json
from palkit.core.host import cpu_model
from palkit.trainer.checkpoint import read_json
from palkit.trainer.config import TrainConfig
from palkit.trainer.model import PalBert
from palkit.trainer.sampling import epoch_task_schedule
from palkit.trainer.train import PhaseContext, Run, TrainingError

# Dense peak FLOP/s by GPU name fragment and precision (vendor datasheets, SXM parts; fp32 is
# plain fp32, as PyTorch leaves TF32 off for matmuls by default).
MODEL_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
}

# The ways bench-train can run a step, as the training options each one sets.
BENCH_MODES: dict[str, dict[str, Any]] = {
    "eager-fp32": {"precision": "fp32", "compile": False, "cuda_graphs": False},
    "eager-bf16": {"precision": "bf16", "compile": False, "cuda_graphs": False},
    "compiled": {"precision": "bf16", "compile": True, "compile_mode": "default",
                 "cuda_graphs": False},
    "captured": {"precision": "bf16", "compile": False, "cuda_graphs": True},
    "compiled-captured": {"precision": "bf16", "compile": True, "compile_mode": "default",
                          "cuda_graphs": True},
}


@dataclass
class Timing:
    """What one pass of timed steps measured."""
    steps: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    sections_s: dict[str, float] = field(default_factory=dict)   # seconds by part of the step
    tokens: int = 0           # real (unpadded) tokens
    padded_tokens: int = 0
    flops: float = 0.0        # model FLOPs of forward + backward


def step_flops(model: PalBert, task: str, batch: int, width: int) -> float:
    """Matmul FLOPs of one training step of `task` on a batch x width input (padding included:
    the GPU multiplies it too). Forward: 2 per weight of every Linear per row it is applied to
    (the encoder's and the task's PALs' on every token, the pooler and the head on the [CLS]
    row only, a PAL's shared V^E/V^D once per adapted layer) plus QK^T and PV in every attention;
    backward twice the forward (gradients of inputs and of weights). Embedding lookups,
    LayerNorm, softmax and biases are not matmuls and do not count."""
    def weights(module: nn.Module) -> int:
        return sum(m.in_features * m.out_features for m in module.modules()
                   if isinstance(m, nn.Linear))

    trunk, tokens = model.trunk, batch * width
    per_token = weights(trunk.encoder)
    per_row = weights(trunk.pooler) + weights(model.heads[task])
    attention_width = trunk.config.hidden_size * trunk.config.num_hidden_layers
    if model.pal is not None and task in model.adapters:
        adapter = model.adapters[task]
        for slot in range(len(model.pal.layers)):
            proj = 0 if model.pal.share_projections else slot
            per_token += (weights(adapter.encoders[proj]) + weights(adapter.attentions[slot])
                          + weights(adapter.decoders[proj]))
        attention_width += model.pal.size * len(model.pal.layers)
    forward = 2 * per_token * tokens + 2 * per_row * batch + 4 * tokens * width * attention_width
    return 3.0 * forward


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(run: Run, ctx: PhaseContext, schedule: list[int], sections: bool) -> Timing:
    """Run `schedule`'s steps as the training loop does; with `sections`, time each part (the
    optimisers' share through their step hooks, so the step's code stays the loop's own)."""
    captured, device, losses = ctx.step.capture, run.dist.device, []
    parts = ("data", "graph") if captured else ("data", "forward_backward", "optimizer")
    timing = Timing(sections_s=dict.fromkeys(parts, 0.0))
    tokens = torch.zeros((), dtype=torch.long, device=device)  # summed there: no wait per step
    clock = time.perf_counter
    marks: dict[str, float] = {}

    def before(*_: Any) -> None:
        _sync(device)
        marks.setdefault("optimizer", clock())

    def after(*_: Any) -> None:
        _sync(device)
        marks["optimizer_end"] = clock()

    hooks = ([h for opt in ctx.opts.opts.values()
              for h in (opt.register_step_pre_hook(before), opt.register_step_post_hook(after))]
             if sections and not captured else [])
    _sync(device)
    start_wall, start_cpu = clock(), time.process_time()
    for position, task_index in enumerate(schedule):
        spec = ctx.specs[task_index]
        t0 = clock()
        batch = run.batch(spec, ctx.streams[spec.name])
        if sections:
            _sync(device)
        t1 = clock()
        marks.clear()
        losses.append(ctx.step(spec, batch, position))
        if sections:
            _sync(device)
        t2 = clock()
        timing.sections_s["data"] += t1 - t0
        if captured:
            timing.sections_s["graph"] += t2 - t1
        else:
            opt_s = marks.get("optimizer_end", t2) - marks.get("optimizer", t2)
            timing.sections_s["forward_backward"] += t2 - t1 - opt_s
            timing.sections_s["optimizer"] += opt_s
        rows, width = batch["input_ids"].shape   # with graph widths, already one of them
        tokens += batch["attention_mask"].sum()
        timing.padded_tokens += rows * width
        timing.flops += step_flops(run.model, spec.name, rows, width)
    _sync(device)
    timing.wall_s, timing.cpu_s = clock() - start_wall, time.process_time() - start_cpu
    timing.steps, timing.tokens = len(schedule), int(tokens)
    for hook in hooks:
        hook.remove()
    if not torch.isfinite(torch.stack(losses)).all():
        raise TrainingError("bench-train: the loss became non-finite; lower --lr")
    return timing


def peak_flops(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peaks[precision] for part, peaks in MODEL_PEAK_FLOPS.items() if part in name),
                None)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({cpu_model()}, {torch.get_num_threads()} threads)"


def summarise(timing: Timing, peak: float | None) -> dict[str, Any]:
    """One repeat's figures."""
    wall = timing.wall_s
    return {"steps_per_s": round(timing.steps / wall, 3),
            "tokens_per_s": round(timing.tokens / wall, 1),
            "padded_tokens_per_s": round(timing.padded_tokens / wall, 1),
            "wall_s": round(wall, 6), "cpu_s": round(timing.cpu_s, 3),
            "mfu": round(timing.flops / wall / peak, 4) if peak else None}


def shares(timing: Timing) -> dict[str, float]:
    total = sum(timing.sections_s.values())
    return {k: round(v / total, 3) for k, v in timing.sections_s.items() if k != "graph" or v}


def bench_training(cfg: TrainConfig, steps: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Time `repeats` passes of `steps` training steps after `warmup` untimed ones."""
    if cfg.mode == "separate":
        raise TrainingError("bench-train times one model; for --mode separate time --mode "
                            "shared --tasks TASK, which is what each separate model trains")
    run = Run(cfg, resume=False)
    cfg = run.cfg          # --cuda-graphs and --compile as this device resolves them
    ctx = run.phase_context(run.phases[0])
    device = run.dist.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    total = warmup + repeats * steps
    schedule = epoch_task_schedule(ctx.sampling, ctx.sizes, 1, run.phases[0].epochs, total,
                                   cfg.seed)
    timed_steps(run, ctx, schedule[:warmup], sections=False)   # allocations, compilation, capture
    warm_graphs, warm_capture_s = run.graphs.count, run.graphs.capture_s
    peak = peak_flops(device, cfg.precision)
    passes, section_passes = [], []
    for r in range(repeats):
        part = schedule[warmup + r * steps:warmup + (r + 1) * steps]
        cuda = device.type == "cuda"   # there the shares' synchronisations would slow the pass
        passes.append(timed_steps(run, ctx, part, sections=not cuda))
        section_passes.append(timed_steps(run, ctx, part, sections=True) if cuda else passes[-1])
    figures = [summarise(t, peak) for t in passes]
    headline = {key: statistics.median(f[key] for f in figures)
                for key in ("steps_per_s", "tokens_per_s", "padded_tokens_per_s", "cpu_s")}
    return {"bench_mode": bench_mode_name(cfg), **headline,
            "mfu": figures[len(figures) // 2]["mfu"],
            "shares": shares(section_passes[len(section_passes) // 2]),
            "repeats": figures, "steps": steps, "warmup": warmup, "precision": cfg.precision,
            "batch_size": cfg.batch_size, "max_len": cfg.max_len, "mode": cfg.mode,
            "tasks": list(cfg.tasks), "length_buckets": cfg.length_buckets,
            "compile": cfg.compile, "compile_mode": cfg.compile_mode if cfg.compile else None,
            "cuda_graphs": cfg.cuda_graphs, "graph_widths": list(ctx.step.widths or []) or None,
            "captured": ctx.step.capture, "graphs": run.graphs.count,
            "capture_s": round(run.graphs.capture_s, 3),
            # Graphs first met in a timed pass were captured inside it (their capture counted).
            "graphs_captured_while_timed": run.graphs.count - warm_graphs,
            "capture_s_while_timed": round(run.graphs.capture_s - warm_capture_s, 3),
            "peak_gpu_memory_gib": (round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
                                    if device.type == "cuda" else None),
            "flops_counted": "matmuls without the embedding lookups (trainer/profile.py "
                             "step_flops)",
            "distill_from": cfg.distill_from, "load_avg_1min": round(os.getloadavg()[0], 2),
            **provenance(device)}


def bench_mode_name(cfg: TrainConfig) -> str:
    """How a config's step runs, named as BENCH_MODES names it (precision added unless bf16
    for the compiled and captured ones); the entry's `captured` says whether capture happened."""
    parts = [p for p, on in (("compiled", cfg.compile), ("captured", cfg.cuda_graphs)) if on]
    name = "-".join(parts) or "eager"
    return name if parts and cfg.precision == "bf16" else f"{name}-{cfg.precision}"


def bench_modes(cfg: TrainConfig, modes: list[str], steps: int, warmup: int,
                repeats: int) -> list[dict[str, Any]]:
    """One entry per mode, each timed on a fresh Run, in the order given; a mode this machine
    cannot run gets an entry that says why instead of figures, and so does one that fails."""
    unknown = [m for m in modes if m not in BENCH_MODES]
    if unknown:
        raise TrainingError(f"--modes: unknown mode(s) {', '.join(unknown)}; choose from "
                            f"{', '.join(BENCH_MODES)}")
    device = torch.device("cuda" if cfg.device == "cuda" or (
        cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    entries = []
    for mode in modes:
        if BENCH_MODES[mode]["cuda_graphs"] and device.type != "cuda":
            entries.append({"bench_mode": mode, "skipped": "needs a CUDA device: capture records "
                            "CUDA kernels (the same step runs uncaptured on a CPU; time that as "
                            "--cuda-graphs without --modes)", **provenance(device)})
            continue
        try:
            entry = bench_training(cfg.replace(**BENCH_MODES[mode]), steps, warmup, repeats)
        except (RuntimeError, ValueError) as e:   # one mode's failure must not lose the others'
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            entry = {"failed": f"{type(e).__name__}: {first[:300]}",
                     "device": describe_device(device), "torch": torch.__version__}
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        entries.append({"bench_mode": mode, **entry})
    return entries


def provenance(device: torch.device) -> dict[str, Any]:
    """What an entry was measured with: the device, torch, the date and palkit's commit."""
    # palkit's commit where it runs from a checkout; an installed palkit has none (a venv inside
    # some other repository must not report that repository's commit).
    package = Path(__file__).resolve().parents[1]
    done = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True) if (package / ".git").exists() else None
    return {"device": describe_device(device), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": done.stdout.strip() if done and done.returncode == 0 else None}


def append_entry(results: Path, entry: dict[str, Any]) -> None:
    """Add one entry to the JSON list in `results` (written whole, atomically)."""
    entries = read_json(results) if results.is_file() else []
    write_json(results, [*entries, entry])
