"""Score a model on dev or test: batched, length-sorted inference and the task metrics."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from palkit.trainer.checkpoint import load_model
from palkit.trainer.data import EncodedSplit, collate, encode, read_examples
from palkit.runtime.labels import label_set, word_tags
from palkit.trainer.metrics import Named, average_score, sentence_metrics, task_metrics
from palkit.trainer.model import PalBert, regression_score
from palkit.trainer.tasks import TaskSpec
from palkit.ui.progress import track


@torch.no_grad()
def predict_split(model: PalBert, task: str, split: EncodedSplit, pad_id: int,
                  batch_size: int, device: torch.device) -> torch.Tensor | Named:
    """In the split's original order: class indices (classification) or scores (regression);
    label names (multi_label) or one tag per word (token_tagging). Batches are length-sorted to
    pad little."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(split)), key=lambda i: len(split.input_ids[i]))
    spec = model.tasks[task]
    out = torch.empty(len(split))
    named: Named = [()] * len(split)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = collate(split, idx, pad_id)
        raw = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                    batch["token_type_ids"].to(device), task=task).float().cpu()
        if spec.is_tagging:
            for row, i in zip(raw, idx):
                named[i] = tuple(word_tags(row.tolist(), split.first_pieces[i], spec.labels,
                                           len(split.gold[i])))
        elif spec.is_multi_label:
            for row, i in zip(raw, idx):
                named[i] = label_set(row.tolist(), spec.labels, spec.threshold)
        else:
            out[idx] = (regression_score(spec, raw) if spec.is_regression
                        else raw.argmax(-1)).float()
    model.train(was_training)
    return named if spec.is_tagging or spec.is_multi_label else out


def evaluate_model(model: PalBert, specs: list[TaskSpec], splits: dict[str, EncodedSplit],
                   pad_id: int, batch_size: int, device: torch.device,
                   progress: str | None = None,
                   kept: dict[str, tuple[Named, Named]] | None = None) -> dict[str, float]:
    """Every task's metrics and their average (and sentence accuracy where set and tagging
    tasks read the same texts); with `progress`, a bar of that name per task (not during
    training, whose own bar is showing). Set and tagging tasks' (predictions, gold) go into
    `kept` when given."""
    metrics: dict[str, float] = {}
    named: dict[str, tuple[Named, Named]] = {} if kept is None else kept
    for spec in (track(specs, progress) if progress else specs):
        split = splits[spec.name]
        preds = predict_split(model, spec.name, split, pad_id, batch_size, device)
        metrics.update(task_metrics(spec, preds, split.labels if split.gold is None else split.gold))
        if split.gold is not None:
            named[spec.name] = (preds, split.gold)  # type: ignore[assignment]
    metrics.update(sentence_metrics(specs, named))
    metrics["avg"] = average_score(specs, metrics)
    return metrics


def evaluate_model_dir(model_dir: Path, data_dir: Path, split: str, max_len: int,
                       batch_size: int = 128, max_examples: int | None = None,
                       keep_predictions: bool = False) -> dict[str, Any]:
    """Load RUN/model (or a model folder) and score every task it has that has this split; with
    `keep_predictions`, also the set and tagging tasks' predictions and gold ("examples", as
    evaluate_bundle keeps them)."""
    model, tokenizer, trunk_sha = load_model(model_dir)
    specs = [s for s in model.tasks.values() if split in s.files]
    splits = {s.name: encode(s, read_examples(s, data_dir, split)[:max_examples], tokenizer, max_len)
              for s in specs}
    # On the GPU when there is one: a CPU pass over a test set takes minutes at max length 128.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kept: dict[str, tuple[Named, Named]] = {}
    metrics = evaluate_model(model.to(device), specs, splits, tokenizer.pad_token_id, batch_size,
                             device, progress=f"evaluating {split}", kept=kept)
    examples = {t: {"pred": [list(x) for x in p], "gold": [list(x) for x in g]}
                for t, (p, g) in kept.items()}
    return {"split": split, "trunk_sha256": trunk_sha, "tasks": [s.name for s in specs],
            "max_len": max_len, **metrics, **({"examples": examples} if keep_predictions else {})}
