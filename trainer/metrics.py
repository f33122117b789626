"""Task metrics and the single average the seeds' reports rank models by."""
from __future__ import annotations

import torch

from palkit.trainer.tasks import TaskSpec


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denom = x.norm() * y.norm()
    return float((x @ y) / denom) if denom > 0 else 0.0


def ranks(x: torch.Tensor) -> torch.Tensor:
    """Average ranks (ties share the mean rank), as Spearman's rho needs."""
    values = x.double()
    r = torch.empty(len(x), dtype=torch.float64)
    r[torch.argsort(values, stable=True)] = torch.arange(len(x), dtype=torch.float64)
    _, tie, counts = torch.unique(values, return_inverse=True, return_counts=True)
    return (torch.zeros(len(counts), dtype=torch.float64).index_add_(0, tie, r) / counts)[tie]


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    return pearson(ranks(x), ranks(y))


def binary_f1(pred: torch.Tensor, gold: torch.Tensor) -> float:
    tp = int(((pred == 1) & (gold == 1)).sum())
    fp = int(((pred == 1) & (gold == 0)).sum())
    fn = int(((pred == 0) & (gold == 1)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def task_metrics(spec: TaskSpec, predictions: torch.Tensor, gold: torch.Tensor) -> dict[str, float]:
    """Predictions are class indices for classification, scores for regression."""
    n = spec.name
    if spec.is_regression:
        return {f"{n}_pearson": pearson(predictions, gold), f"{n}_spearman": spearman(predictions, gold)}
    out = {f"{n}_acc": float((predictions == gold.long()).float().mean())}
    if spec.num_outputs == 2:
        out[f"{n}_f1"] = binary_f1(predictions, gold.long())
    return out


def primary_score(spec: TaskSpec, metrics: dict[str, float]) -> float:
    """Accuracy, or (Pearson + 1) / 2 so that correlations share the 0..1 scale."""
    if spec.is_regression:
        return (metrics[f"{spec.name}_pearson"] + 1) / 2
    return metrics[f"{spec.name}_acc"]


def average_score(specs: list[TaskSpec], metrics: dict[str, float]) -> float:
    return sum(primary_score(s, metrics) for s in specs) / len(specs)
