"""Task metrics and the single average the seeds' reports rank models by."""
from __future__ import annotations

import numpy as np
import torch

from palkit.runtime.labels import span_counts, span_f1
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


# What a set or tagging task predicts per text: label names, or one tag per word.
Named = list[tuple[str, ...]]


def set_metrics(name: str, predictions: Named, gold: Named) -> dict[str, float]:
    """Exact-set accuracy (JointBERT's intent accuracy) and micro F1 over (text, label) pairs."""
    exact = sum(set(p) == set(g) for p, g in zip(predictions, gold))
    tp = sum(len(set(p) & set(g)) for p, g in zip(predictions, gold))
    n_pred = sum(len(set(p)) for p in predictions)
    n_gold = sum(len(set(g)) for g in gold)
    return {f"{name}_acc": exact / len(gold),
            f"{name}_micro_f1": 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0}


def tagging_metrics(name: str, predictions: Named, gold: Named) -> dict[str, float]:
    """Span precision, recall and F1 as the CoNLL evaluation computes them (runtime/labels.py)."""
    precision, recall, f1 = span_f1([span_counts(g, p) for p, g in zip(predictions, gold)])
    return {f"{name}_f1": f1, f"{name}_precision": precision, f"{name}_recall": recall}


def sentence_accuracy(specs: list[TaskSpec], predictions: list[Named], gold: list[Named]) -> float:
    """The share of texts that every one of `specs` (set or tagging tasks on the same texts)
    gets wholly right, each label set and every tag: JointBERT's sentence accuracy for an
    intent and its slots."""
    def right(spec: TaskSpec, p: tuple[str, ...], g: tuple[str, ...]) -> bool:
        return p == g if spec.is_tagging else set(p) == set(g)

    rows = range(len(gold[0]))
    return sum(all(right(s, p[i], g[i]) for s, p, g in zip(specs, predictions, gold))
               for i in rows) / len(rows)


def same_texts(specs: list[TaskSpec]) -> list[list[TaskSpec]]:
    """Groups of two or more tasks that read the same files and text column (an utterance's
    intent and slots): their texts are one, row by row."""
    groups: dict[tuple, list[TaskSpec]] = {}
    for s in specs:
        groups.setdefault((tuple(sorted(s.files.items())), s.text_columns), []).append(s)
    return [g for g in groups.values() if len(g) > 1]


SENTENCE_SUFFIX = "_sentence_acc"


def sentence_key(group: list[TaskSpec]) -> str:
    """The group's names sorted: one key however its tasks are ordered (a bundle, two models)."""
    return "+".join(sorted(s.name for s in group)) + SENTENCE_SUFFIX


def sentence_metrics(specs: list[TaskSpec], kept: dict[str, tuple[Named, Named]]) -> dict[str, float]:
    """Sentence accuracy of each group of `specs` on the same texts (same_texts), from each
    set or tagging task's (predictions, gold) in `kept`: one model's tasks or separate models'."""
    return {sentence_key(group): sentence_accuracy(group, [kept[s.name][0] for s in group],
                                                   [kept[s.name][1] for s in group])
            for group in same_texts([s for s in specs if s.name in kept])}


def task_metrics(spec: TaskSpec, predictions: torch.Tensor | Named,
                 gold: torch.Tensor | Named) -> dict[str, float]:
    """Predictions are class indices for classification, scores for regression, label names for
    multi_label and word tags for token_tagging (gold as the split's `gold`)."""
    n = spec.name
    if spec.is_multi_label:
        return set_metrics(n, predictions, gold)  # type: ignore[arg-type]
    if spec.is_tagging:
        return tagging_metrics(n, predictions, gold)  # type: ignore[arg-type]
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
    if spec.is_tagging:
        return metrics[f"{spec.name}_f1"]
    return metrics[f"{spec.name}_acc"]


def ratio_terms(spec: TaskSpec, predictions: Named, gold: Named) -> np.ndarray:
    """Per text [n, 2], what a set or tagging task's primary metric sums above and below its
    line: exact-set accuracy is sum(right) / sum(1), span F1 sum(2 correct) / sum(predicted +
    gold); a resample's metric is the ratio of its texts' sums (the report's paired gap)."""
    if spec.is_tagging:
        counts = [span_counts(g, p) for p, g in zip(predictions, gold)]
        return np.array([[2 * c.correct, c.predicted + c.gold] for c in counts], float)
    return np.array([[set(p) == set(g), 1] for p, g in zip(predictions, gold)], float)


def average_score(specs: list[TaskSpec], metrics: dict[str, float]) -> float:
    return sum(primary_score(s, metrics) for s in specs) / len(specs)
