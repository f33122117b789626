"""What a run is made of: its phases (joint training, then optionally one adapter-tuning phase
per task), the parameters each phase updates, and what a phase trains with."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from palkit.trainer.config import TrainConfig
from palkit.trainer.model import PalBert
from palkit.trainer.sampling import TaskStream
from palkit.trainer.step import PhaseOptimizers, TrainStep
from palkit.trainer.surgery import GradVac
from palkit.trainer.tasks import TaskSpec


@dataclass(frozen=True)
class Phase:
    name: str                 # "joint" or "tune:<task>"
    tasks: tuple[str, ...]    # tasks that train in this phase
    epochs: int
    trunk_trainable: bool


def plan_phases(cfg: TrainConfig, specs: list[TaskSpec]) -> list[Phase]:
    names = tuple(s.name for s in specs)
    tuned = names if cfg.tune_adapters_after else ()
    return [Phase("joint", names, cfg.epochs, not cfg.freeze_trunk),
            *(Phase(f"tune:{n}", (n,), cfg.tune_adapters_after, False) for n in tuned)]


def trainable_parameters(model: PalBert, phase: Phase) -> dict[str, torch.nn.Parameter]:
    """Named parameters this phase updates; everything else gets requires_grad=False."""
    task_owned = {id(p) for task in phase.tasks for p in model.task_parameters(task).values()}
    for name, p in model.named_parameters():
        p.requires_grad_(id(p) in task_owned
                         or (phase.trunk_trainable and name.startswith("trunk.")))
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


@dataclass
class PhaseContext:
    """What one phase trains with: its tasks, their data streams, the optimiser."""
    phase: Phase
    specs: list[TaskSpec]
    sizes: list[int]                      # training examples per task
    sampling: str                         # --sampling; round-robin when one task trains
    streams: dict[str, TaskStream]
    gradvac: GradVac | None
    opts: PhaseOptimizers
    model: torch.nn.Module                # the model, or its DistributedDataParallel wrapper
    step: TrainStep | None = None         # set once the context exists (the step calls back)
