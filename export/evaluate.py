"""Metrics of an exported bundle as its runtime computes them (`palkit evaluate BUNDLE`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.manifest import MANIFEST_FILE, BundleError
from palkit.ui.progress import track


def score_target(target: Path, data_dir: Path, split: str, max_len: int | None,
                 max_examples: int | None, runtime: str | None,
                 trust_key: Path | None = None) -> dict[str, Any]:
    """Metrics (fractions) of a bundle folder (run by its runtime, its signature checked
    against `trust_key` when given) or of a training run."""
    from palkit.trainer.scoring import score_run

    if (target / MANIFEST_FILE).is_file():
        return evaluate_bundle(target, data_dir, split, max_examples, runtime, trust_key)
    return score_run(target, data_dir, split, max_len, max_examples)


def evaluate_bundle(bundle: str | Path, data_dir: Path, split: str,
                    max_examples: int | None = None, runtime: str | None = None,
                    trust_key: Path | None = None,
                    keep_predictions: bool = False) -> dict[str, Any]:
    """Metrics of the exported artifacts as run by the runtime (same keys as evaluate_model_dir);
    with `keep_predictions`, also each task's predictions and gold labels in file order
    ("examples": {task: {"pred": [...], "gold": [...]}}), for paired comparisons."""
    import torch

    from palkit.runtime.labels import label_set, word_tags
    from palkit.trainer.data import read_examples
    from palkit.trainer.metrics import average_score, sentence_metrics, task_metrics
    from palkit.trainer.tasks import TaskSpec

    b = load_bundle(bundle, runtime=runtime, trust_key=trust_key)
    engine = Engine(b, runtime or "")
    specs = [TaskSpec.from_dict(t.spec) for t in b.manifest.tasks]
    specs = [s for s in specs if split in s.files]
    if not specs:
        raise BundleError(f"{b.folder}: no task in this bundle has a '{split}' split")
    metrics: dict[str, float] = {}
    examples_kept: dict[str, dict[str, list]] = {}
    named: dict[str, tuple[list, list]] = {}   # set and tagging tasks: predictions, gold
    for spec in track(specs, f"evaluating {b.folder.name} on {split} ({engine.runtime})"):
        examples = read_examples(spec, data_dir, split)[:max_examples]
        labels = list(spec.labels or ())
        preds: list = []
        for ex in examples:
            if spec.is_tagging:
                words = engine.tokenizer.words(ex.texts[0], warn=False)
                out, _, _ = engine.run_ids(spec.name, words.ids, words.mask, words.types)
                preds.append(tuple(word_tags(out.tolist(), words.first_pieces, labels,
                                             len(words.words))))
                continue
            ids, mask, types = engine.tokenizer(*ex.texts, warn=False)
            out, _, _ = engine.run_ids(spec.name, ids, mask, types)
            preds.append(label_set(out.tolist(), labels, spec.threshold) if spec.is_multi_label
                         else float(out[0]) if spec.is_regression else float(out.argmax()))
        if spec.is_tagging or spec.is_multi_label:
            gold: Any = [e.label for e in examples]
            metrics.update(task_metrics(spec, preds, gold))
            named[spec.name] = (preds, gold)
            examples_kept[spec.name] = {"pred": [list(p) for p in preds],
                                        "gold": [list(g) for g in gold]}
            continue
        gold = torch.tensor([e.label for e in examples], dtype=torch.float32)
        metrics.update(task_metrics(spec, torch.tensor(preds), gold))
        examples_kept[spec.name] = {"pred": preds, "gold": gold.tolist()}
    metrics.update(sentence_metrics(specs, named))
    metrics["avg"] = average_score(specs, metrics)
    return {"split": split, "tasks": [s.name for s in specs], "runtime": engine.runtime,
            "bundle": str(b.folder), "trunk_sha256": b.manifest.trunk.sha256,
            "max_len": engine.tokenizer.max_length, **metrics,
            **({"examples": examples_kept} if keep_predictions else {})}
