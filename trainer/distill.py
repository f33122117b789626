"""Multi-task knowledge distillation from single-task models (Clark et al. 2019, "BAM!
Born-Again Multi-Task Networks").

The teachers are the models of a `--mode separate` run (RUN/models/<task>/model), one per task.
At each joint step the task's target mixes the teacher's output on the same batch with the gold
label; the teacher's weight w falls linearly from 1 at the first step to 0 at the last ("teacher
annealing"), so the student starts by imitating the teachers and ends on the gold labels alone.

Mixing targets is mixing losses: cross-entropy and squared error are linear in the target (up
to a term that does not depend on the student), so
    CE(student, w·softmax(teacher) + (1-w)·onehot(gold))
        = w·CE(student, softmax(teacher)) + (1-w)·CE(student, gold)
and the gradients of the squared error to w·teacher + (1-w)·gold equal those of the w-mixture
of the two squared errors. The teachers run in eval mode (no dropout) and use no RNG, so a
resumed run computes exactly what an uninterrupted one does.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from palkit.core.errors import PalkitError
from palkit.trainer.checkpoint import load_model, separate_models
from palkit.trainer.model import PalBert, regression_score
from palkit.trainer.tasks import TaskSpec


class DistillError(PalkitError, ValueError):
    """--distill-from names something that cannot teach this run."""


def teacher_weight(step: int, total: int) -> float:
    """The teacher's weight at 0-based `step` of `total`: 1 first, 0 last, linear between."""
    return 1.0 - step / max(1, total - 1)


def mixed_target(spec: TaskSpec, teacher_raw: torch.Tensor, labels: torch.Tensor,
                 weight: float, sts_loss: str) -> torch.Tensor:
    """The target the student is trained on, in the form its task loss takes: class
    probabilities, a score in score_range (mse) or a score scaled to [0, 1] (bce)."""
    teacher_raw = teacher_raw.float()
    if not spec.is_regression:
        gold = F.one_hot(labels.long(), spec.num_outputs).float()
        return weight * teacher_raw.softmax(-1) + (1 - weight) * gold
    if sts_loss == "bce":
        low, high = spec.score_range  # type: ignore[misc]
        return (weight * torch.sigmoid(teacher_raw.squeeze(-1))
                + (1 - weight) * (labels - low) / (high - low))
    return weight * regression_score(spec, teacher_raw) + (1 - weight) * labels


def distill_loss(spec: TaskSpec, raw: torch.Tensor, labels: torch.Tensor,
                 teacher_raw: torch.Tensor, weight: float, sts_loss: str) -> torch.Tensor:
    """The task's loss against the mixed target (at weight 0: the plain task loss)."""
    raw = raw.float()
    target = mixed_target(spec, teacher_raw, labels, weight, sts_loss)
    if not spec.is_regression:
        return F.cross_entropy(raw, target)
    if sts_loss == "bce":
        return F.binary_cross_entropy_with_logits(raw.squeeze(-1), target)
    return F.mse_loss(regression_score(spec, raw), target)


class Teachers:
    """The separate run's single-task models, frozen, in eval mode, on the training device."""

    def __init__(self, run: Path, tasks: list[str], tokenizer, device: torch.device):
        run = Path(run)
        available = {p.name: p for p in separate_models(run)}
        if not available:
            raise DistillError(f"{run}: not a --mode separate run (no models/<task>/ folders); "
                               "train the teachers with `palkit train --mode separate`")
        self.models: dict[str, PalBert] = {}
        for task in tasks:
            if task not in available:
                raise DistillError(f"{run}: no separate model for task '{task}' (it has "
                                   f"{', '.join(sorted(available))}); train it with --mode "
                                   f"separate --tasks {task}")
            model, teacher_tokenizer, _ = load_model(available[task] / "model", [task])
            if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
                raise DistillError(f"{available[task]}: its tokenizer differs from the trained "
                                   "model's; distil from teachers built on the same --base-model")
            self.models[task] = model.to(device).eval().requires_grad_(False)

    @torch.no_grad()
    def outputs(self, task: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teacher's raw outputs for `task` on a training batch."""
        return self.models[task](batch["input_ids"], batch["attention_mask"],
                                 batch["token_type_ids"], task=task)
