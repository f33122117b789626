"""One training step, written so that a CUDA graph can hold all of it.

Eager training and `--cuda-graphs` run the same `TrainStep.compute` (forward, loss, backward,
clipping, AdamW); capture is the only part that needs a GPU. What makes it capturable, and why
each piece still computes what the plain eager step computed:

- Static inputs: a batch is padded up to one of a few widths (`--graph-widths`) and gathered
  straight into that (task, width)'s input tensors, so a graph is recorded once per (task,
  width) and replayed on fresh data. Padded positions are masked out.
- Every trainable parameter's .grad is allocated once, before any capture, and zeroed in place.
- One AdamW for the trunk and one per task: a step of task t steps the trunk's and t's own, so
  no other task's moments, step count or weight decay move -- exactly what one AdamW over
  everything did when the other tasks' gradients were None.
- The learning rate is device arithmetic on the step's position (`lr_at`): a float64 tensor on
  a CPU, where fused AdamW reads it as the double it was; float32 on CUDA, the kernel's type.
- clip_grad_norm_ scales by min(1, max_norm / norm) on the device, and the loss stays there:
  no host read inside the step.

Dropout inside a graph draws new numbers on each replay: during capture PyTorch records the
philox offset the graph consumes and each replay advances the default CUDA generator's offset by
that much (Note [CUDA Graph-safe RNG states], aten/src/ATen/CUDAGeneratorImpl.h); only the
default generator may be used inside a capture, which is what dropout uses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from palkit.trainer.checkpoint import CheckpointError
from palkit.trainer.config import TrainConfig
from palkit.trainer.tasks import TaskSpec

# Eager steps of each (task, width) before its graph is captured: the first creates the task's
# AdamW moments and the kernels' workspaces outside the graph's memory pool.
WARMUP_STEPS = 2


def lr_at(position: torch.Tensor, total: int, cfg: TrainConfig) -> torch.Tensor:
    """Linear warmup over warmup_ratio of the phase's `total` steps, then linear decay to zero,
    at the 0-based step `position` (a float64 tensor, so that this equals the same arithmetic
    done in Python doubles)."""
    warmup = max(1, int(cfg.warmup_ratio * total))
    rising = cfg.lr * (position + 1) / warmup
    falling = cfg.lr * torch.clamp((total - position) / max(1, total - warmup), min=0.0)
    return torch.where(position < warmup, rising, falling)


def width_for(length: int, widths: tuple[int, ...]) -> int:
    return next(w for w in widths if w >= length)


def no_decay(name: str) -> bool:
    """BERT convention: no weight decay on biases and LayerNorm weights."""
    return name.endswith("bias") or "LayerNorm" in name


def decayed_first(names: Iterable[str]) -> list[str]:
    """The names in one AdamW's group order: decayed first, then not (a stable sort)."""
    return sorted(names, key=no_decay)


class PhaseOptimizers:
    """One fused AdamW for the trunk and one per task, all reading one learning-rate tensor.
    `order` is every trained parameter in the order of one AdamW over all of them, which fixes
    the order gradients are clipped in."""

    def __init__(self, params: dict[str, torch.nn.Parameter], task_of: dict[str, str],
                 cfg: TrainConfig, device: torch.device, capturable: bool):
        self.lr = torch.zeros((), dtype=torch.float64 if device.type == "cpu" else torch.float32,
                              device=device)
        groups: dict[str, dict[str, torch.nn.Parameter]] = {}
        for name, p in params.items():
            groups.setdefault(task_of.get(name, "trunk"), {})[name] = p
        self.opts = {owner: self._adamw(named, cfg, capturable) for owner, named in groups.items()}
        self.names = {owner: decayed_first(named) for owner, named in groups.items()}
        self.order = [params[n] for n in decayed_first(params)]

    def _adamw(self, named: dict[str, torch.nn.Parameter], cfg: TrainConfig,
               capturable: bool) -> torch.optim.AdamW:
        decay = [p for n, p in named.items() if not no_decay(n)]
        plain = [p for n, p in named.items() if no_decay(n)]
        # fused: one kernel for all parameters instead of a handful per tensor (CPU and CUDA);
        # capturable (captured steps only): step() may run inside a graph capture; PyTorch warns
        # when such an optimizer steps uncaptured, so the eager path leaves it off.
        return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                  {"params": plain, "weight_decay": 0.0}], lr=self.lr,
                                 fused=True, capturable=capturable)

    def owners(self, task: str) -> list[str]:
        """The optimizers a step of `task` steps: the trunk's (when it trains) and the task's."""
        return [o for o in ("trunk", task) if o in self.opts]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Every optimizer's state_dict() state keyed "<parameter name>.<key>" (what one AdamW
        saved), for safetensors: no pickle."""
        return {f"{self.names[owner][index]}.{key}": value.detach().cpu().contiguous()
                for owner, opt in self.opts.items()
                for index, state in opt.state_dict()["state"].items()
                for key, value in state.items()}

    def restore(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load state_tensors() back through each optimizer's load_state_dict."""
        slot = {n: (o, i) for o, names in self.names.items() for i, n in enumerate(names)}
        saved: dict[str, dict[int, dict[str, torch.Tensor]]] = {o: {} for o in self.opts}
        for stored, value in tensors.items():
            name, key = stored.rsplit(".", 1)
            if name not in slot:
                raise CheckpointError(f"optimizer state for '{name}', which this phase does not "
                                      "train; resume with the options the run was started with")
            owner, index = slot[name]
            saved[owner].setdefault(index, {})[key] = value
        for owner, opt in self.opts.items():
            opt.load_state_dict({**opt.state_dict(), "state": saved[owner]})
            for group in opt.param_groups:   # load_state_dict put a copy of the LR tensor there
                group["lr"] = self.lr


@dataclass
class Graphs:
    """What every phase's graphs share: the memory pool, and each (task, width)'s input tensors
    (the batches are gathered into them); and for bench-train, graphs and seconds capturing."""
    pool: tuple | None = None
    count: int = 0
    capture_s: float = 0.0
    inputs: dict[tuple[str, int], dict[str, torch.Tensor]] = field(default_factory=dict)


class TrainStep:
    """The training step of one phase. With `widths`, a batch comes padded to one of them, in
    its (task, width)'s input tensors in `graphs.inputs` (what a graph needs; on a CPU the step
    runs uncaptured, to test exactly this path); `capture`: on CUDA, each (task, width) is
    recorded once as a CUDA graph and replayed."""

    def __init__(self, forward_loss: Callable[[TaskSpec, dict[str, torch.Tensor], torch.Tensor],
                                              torch.Tensor],
                 opts: PhaseOptimizers, task_params: dict[str, list[torch.nn.Parameter]],
                 trunk_params: list[torch.nn.Parameter], total_steps: int, cfg: TrainConfig,
                 device: torch.device, widths: tuple[int, ...] | None, capture: bool,
                 graphs: Graphs):
        self.forward_loss, self.opts, self.cfg, self.device = forward_loss, opts, cfg, device
        self.total, self.widths, self.capture, self.graphs = total_steps, widths, capture, graphs
        # The gradients a step of task t writes and clips, in the one-AdamW order.
        mine = {task: {id(p) for p in (*trunk_params, *own)} for task, own in task_params.items()}
        self.step_params = {task: [p for p in opts.order if id(p) in ids]
                            for task, ids in mine.items()}
        for p in opts.order:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.position = torch.zeros((), dtype=torch.float64, device=device)
        self.seen: dict[tuple[str, int], int] = {}
        self.replays: dict[tuple[str, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def compute(self, spec: TaskSpec, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The whole step: the one implementation, run eagerly or recorded into a graph."""
        params = self.step_params[spec.name]
        torch._foreach_zero_([p.grad for p in params])
        self.opts.lr.copy_(lr_at(self.position, self.total, self.cfg))
        loss = self.forward_loss(spec, batch, self.position)
        loss.backward()
        if self.cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        for owner in self.opts.owners(spec.name):
            self.opts.opts[owner].step()
        return loss.detach()

    def __call__(self, spec: TaskSpec, batch: dict[str, torch.Tensor],
                 position: int) -> torch.Tensor:
        self.position.fill_(position)
        if self.widths is None:
            return self.compute(spec, batch)
        key = (spec.name, batch["input_ids"].shape[1])
        static = self.graphs.inputs.get(key)
        if static is not batch:   # a graph would replay on whatever its input tensors hold
            raise ValueError(f"a step with graph widths takes the batch that Run.batch gathered "
                             f"into the input tensors of {key}")
        if not self.capture:
            return self.compute(spec, static)
        if key in self.replays:
            graph, loss = self.replays[key]
            graph.replay()
            return loss.clone()
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] <= WARMUP_STEPS:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                loss = self.compute(spec, static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss
        return self._capture(key, spec, static)

    def _capture(self, key: tuple[str, int], spec: TaskSpec,
                 static: dict[str, torch.Tensor]) -> torch.Tensor:
        """Record this (task, width)'s step into a graph (sharing one memory pool with the
        others), then replay it once: capture records kernels without running them."""
        torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.graphs.pool):
            loss = self.compute(spec, static)
        torch.cuda.synchronize(self.device)
        self.graphs.capture_s += time.perf_counter() - started
        if self.graphs.pool is None:
            self.graphs.pool = graph.pool()
        self.graphs.count += 1
        self.replays[key] = (graph, loss)
        graph.replay()
        return loss.clone()
