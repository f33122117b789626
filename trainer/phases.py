"""A run's phases, in the order they train. Each is a class that says how it begins, what it
updates, how it judges an epoch and how it ends:

  JointPhase   every task together (the trunk too, unless --freeze-trunk); --distill-from's
               teachers apply here only. Its best epoch is the best average dev score.
  TunePhase    with --tune-adapters-after N, one per task after the joint phase: only that task's
               adapter and head, on the frozen trunk, starting from the best joint model. Its
               best epoch is the best dev score of its own task, whose adapter the run keeps.

A checkpoint records the phase's index in plan_phases' list; metrics.jsonl records its name
("joint", "tune:<task>").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from palkit.core.fileio import kill_point
from palkit.trainer.checkpoint import load_model, load_task_weights
from palkit.trainer.config import TrainConfig
from palkit.trainer.metrics import average_score, primary_score
from palkit.trainer.model import PalBert
from palkit.trainer.sampling import TaskStream
from palkit.trainer.step import PhaseOptimizers, TrainStep
from palkit.trainer.surgery import GradVac
from palkit.trainer.tasks import TaskSpec

Best = dict[str, Any]   # {"avg", "dev", "epoch"}: the run's best model so far (RUN/model)


@dataclass(frozen=True)
class Phase:
    """One stretch of training with its own optimizers and warmup-then-decay schedule."""
    tasks: tuple[str, ...]    # tasks that train in this phase
    epochs: int
    trunk_trainable: bool
    distills = False          # whether --distill-from's teachers mix into the targets

    @property
    def name(self) -> str:
        raise NotImplementedError

    def begin(self, model: PalBert, run_dir: Path, specs: list[TaskSpec], fresh: bool) -> None:
        """Before the phase's epochs: `fresh` before its first step, else on resuming in it."""

    def judge(self, specs: list[TaskSpec], dev: dict[str, float], best: Best | None,
              epoch: int) -> tuple[float, Best | None]:
        """This epoch's score and the best result so far (a new dict when this epoch is the
        best); `specs` are the run's tasks, `dev` this phase's tasks' dev scores."""
        raise NotImplementedError

    def end(self, model: PalBert, run_dir: Path) -> None:
        """After the phase's last epoch."""


@dataclass(frozen=True)
class JointPhase(Phase):
    distills = True

    @property
    def name(self) -> str:
        return "joint"

    def judge(self, specs: list[TaskSpec], dev: dict[str, float], best: Best | None,
              epoch: int) -> tuple[float, Best | None]:
        if best is None or dev["avg"] > best["avg"]:
            best = {"avg": dev["avg"], "dev": dev, "epoch": epoch}
        return dev["avg"], best


@dataclass(frozen=True)
class TunePhase(Phase):
    @property
    def task(self) -> str:
        return self.tasks[0]

    @property
    def name(self) -> str:
        return f"tune:{self.task}"

    def begin(self, model: PalBert, run_dir: Path, specs: list[TaskSpec], fresh: bool) -> None:
        """Start from the best joint model (a resumed phase has its own weights already)."""
        if fresh:
            best, _, _ = load_model(run_dir / "model", [s.name for s in specs])
            model.load_state_dict(best.state_dict())
            kill_point("tune")

    def judge(self, specs: list[TaskSpec], dev: dict[str, float], best: Best | None,
              epoch: int) -> tuple[float, Best | None]:
        """The task's own score; a better one replaces the task's entries of the best dev."""
        assert best is not None   # the joint phase judged at least one epoch
        spec = next(s for s in specs if s.name == self.task)
        score = primary_score(spec, dev)
        if score > primary_score(spec, best["dev"]):
            merged = {**best["dev"], **{k: v for k, v in dev.items() if k != "avg"}}
            merged["avg"] = average_score(specs, merged)
            best = {"avg": merged["avg"], "dev": merged, "epoch": epoch}
        return score, best

    def end(self, model: PalBert, run_dir: Path) -> None:
        """Keep the task's adapter and head of its best epoch (RUN/model)."""
        load_task_weights(model, self.task,
                          run_dir / "model" / "tasks" / self.task / "adapter.safetensors")


def plan_phases(cfg: TrainConfig, specs: list[TaskSpec]) -> list[Phase]:
    """The run's phases in order: the joint phase, then one tuning phase per task."""
    names = tuple(s.name for s in specs)
    tuned = names if cfg.tune_adapters_after else ()
    return [JointPhase(names, cfg.epochs, not cfg.freeze_trunk),
            *(TunePhase((n,), cfg.tune_adapters_after, False) for n in tuned)]


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
