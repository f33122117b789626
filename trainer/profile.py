"""`palkit bench-train`: how fast the trainer trains a config, and where a step's time goes.

It builds the same Run as `palkit train` (model, tokenized data, optimiser, data streams) and
runs the joint phase's first steps through the same pieces a training step uses (Run.batch,
Run.forward_loss, Run.optimizer_step), without dev scoring or checkpoints. Reported:

- steps/s and tokens/s (real tokens; padded ones too) over the timed steps, wall clock;
- the process's CPU time over the same steps (on a machine shared with other jobs, CPU time per
  step moves less than wall time, and cpu_s / wall_s shows how many cores the step kept busy);
- the share of the step spent building the batch, in forward+backward and in the optimiser;
- on CUDA, the model-FLOP utilisation: 6·N·tokens plus the attention matmuls, over the GPU's
  dense peak for the precision (MODEL_PEAK_FLOPS; None for a device not listed, and on CPU).

On CUDA the shares need a synchronisation at each section boundary, which slows the step, so
there the throughput comes from a separate pass without them. Each repeat is a fresh set of
steps on the same Run; the entry keeps every repeat, and its headline figures are the median.
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

from trainer.checkpoint import read_json
from trainer.config import TrainConfig
from trainer.fileio import write_json
from trainer.host import cpu_model
from trainer.model import PalBert
from trainer.sampling import epoch_task_schedule
from trainer.train import PhaseContext, Run, TrainingError

# Dense peak FLOP/s by GPU name fragment and precision (vendor datasheets, SXM parts; fp32 is
# plain fp32, as PyTorch leaves TF32 off for matmuls by default).
MODEL_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
}


@dataclass
class Timing:
    """What one pass of timed steps measured."""
    steps: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    sections_s: dict[str, float] = field(
        default_factory=lambda: {"data": 0.0, "forward_backward": 0.0, "optimizer": 0.0})
    tokens: int = 0           # real (unpadded) tokens
    padded_tokens: int = 0
    flops: float = 0.0        # model FLOPs of forward + backward


def step_flops(model: PalBert, task: str, batch: int, width: int) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward) for a batch x width
    input: 2 per weight per token for the non-embedding weights the task uses, plus QK^T and
    PV in every attention (the trunk's and the task's PALs)."""
    embeddings = sum(p.numel() for p in model.trunk.embeddings.parameters())
    weights = (sum(p.numel() for p in model.trunk.parameters()) - embeddings
               + sum(p.numel() for p in model.task_parameters(task).values()))
    tokens = batch * width
    attention_width = model.trunk.config.hidden_size * model.trunk.config.num_hidden_layers
    if model.pal is not None and task in model.adapters:
        attention_width += model.pal.size * len(model.pal.layers)
    forward = 2 * weights * tokens + 4 * tokens * width * attention_width
    return 3.0 * forward


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(run: Run, ctx: PhaseContext, schedule: list[int], sections: bool) -> Timing:
    """Run `schedule`'s steps as Run._plain_step does; with `sections`, time each part."""
    timing, device, losses = Timing(), run.dist.device, []
    tokens = torch.zeros((), dtype=torch.long, device=device)  # summed there: no wait per step
    clock = time.perf_counter
    _sync(device)
    start_wall, start_cpu = clock(), time.process_time()
    for task_index in schedule:
        spec = ctx.specs[task_index]
        t0 = clock()
        batch = run.batch(spec, ctx.streams[spec.name])
        if sections:
            _sync(device)
        t1 = clock()
        loss = run.forward_loss(ctx, spec, batch)
        ctx.opt.zero_grad(set_to_none=True)
        loss.backward()
        if sections:
            _sync(device)
        t2 = clock()
        run.optimizer_step(ctx.opt)
        if sections:
            _sync(device)
        losses.append(loss.detach())
        timing.sections_s["data"] += t1 - t0
        timing.sections_s["forward_backward"] += t2 - t1
        timing.sections_s["optimizer"] += clock() - t2
        rows, width = batch["input_ids"].shape
        tokens += batch["attention_mask"].sum()
        timing.padded_tokens += rows * width
        timing.flops += step_flops(run.model, spec.name, rows, width)
    _sync(device)
    timing.wall_s, timing.cpu_s = clock() - start_wall, time.process_time() - start_cpu
    timing.steps, timing.tokens = len(schedule), int(tokens)
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
    return {k: round(v / total, 3) for k, v in timing.sections_s.items()}


def bench_training(cfg: TrainConfig, steps: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Time `repeats` passes of `steps` training steps after `warmup` untimed ones."""
    if cfg.mode == "separate":
        raise TrainingError("bench-train times one model; for --mode separate time --mode "
                            "shared --tasks TASK, which is what each separate model trains")
    run = Run(cfg, resume=False)
    ctx = run.phase_context(run.phases[0])
    device = run.dist.device
    total = warmup + repeats * steps
    schedule = epoch_task_schedule(cfg.sampling if len(ctx.specs) > 1 else "round-robin",
                                   ctx.sizes, 1, run.phases[0].epochs, total, cfg.seed)
    timed_steps(run, ctx, schedule[:warmup], sections=False)   # allocations, compilation
    peak = peak_flops(device, cfg.precision)
    passes, section_passes = [], []
    for r in range(repeats):
        part = schedule[warmup + r * steps:warmup + (r + 1) * steps]
        if device.type == "cuda":   # the shares' synchronisations would slow this pass
            passes.append(timed_steps(run, ctx, part, sections=False))
            section_passes.append(timed_steps(run, ctx, part, sections=True))
        else:
            passes.append(timed_steps(run, ctx, part, sections=True))
            section_passes.append(passes[-1])
    figures = [summarise(t, peak) for t in passes]
    headline = {key: statistics.median(f[key] for f in figures)
                for key in ("steps_per_s", "tokens_per_s", "padded_tokens_per_s", "cpu_s")}
    return {**headline, "mfu": figures[len(figures) // 2]["mfu"],
            "shares": shares(section_passes[len(section_passes) // 2]),
            "repeats": figures, "steps": steps, "warmup": warmup,
            "device": describe_device(device), "precision": cfg.precision,
            "batch_size": cfg.batch_size, "max_len": cfg.max_len, "mode": cfg.mode,
            "tasks": list(cfg.tasks), "length_buckets": cfg.length_buckets,
            "compile": cfg.compile, "compile_mode": cfg.compile_mode if cfg.compile else None,
            "distill_from": cfg.distill_from,
            "torch": torch.__version__, "load_avg_1min": round(os.getloadavg()[0], 2),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit()}


def git_commit() -> str | None:
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def append_entry(results: Path, entry: dict[str, Any]) -> None:
    """Add one entry to the JSON list in `results` (written whole, atomically)."""
    entries = read_json(results) if results.is_file() else []
    write_json(results, [*entries, entry])
