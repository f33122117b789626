"""Score a training run: a run, a model folder, or a separate run (bundles: export/evaluate.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from palkit.trainer.checkpoint import read_json, resolve_model_dir, separate_models
from palkit.trainer.evaluate import evaluate_model_dir
from palkit.trainer.metrics import average_score, sentence_metrics
from palkit.trainer.tasks import TaskSpec


def score_run(target: Path, data_dir: Path, split: str, max_len: int | None,
              max_examples: int | None, keep_predictions: bool = False) -> dict[str, Any]:
    """A run, a model folder, or a --mode separate run (its per-task models merged; the intent
    model's and the slot model's sentence accuracy scored together). `keep_predictions`: as
    evaluate_model_dir."""
    models = separate_models(target)
    if models:
        return _merge_separate(models, data_dir, split, max_len, max_examples)
    model_dir = resolve_model_dir(target)
    if max_len is None:
        summary = model_dir / "summary.json"
        max_len = read_json(summary)["config"]["max_len"] if summary.is_file() else 128
    return evaluate_model_dir(model_dir, data_dir, split, max_len, max_examples=max_examples,
                              keep_predictions=keep_predictions)


def _merge_separate(models: list[Path], data_dir: Path, split: str, max_len: int | None,
                    max_examples: int | None) -> dict[str, Any]:
    merged: dict[str, Any] = {"split": split, "models": {}}
    specs = []
    kept = {}
    for sub in models:
        r = score_run(sub, data_dir, split, max_len, max_examples, keep_predictions=True)
        kept.update({t: (e["pred"], e["gold"]) for t, e in r.pop("examples", {}).items()})
        merged["models"][sub.name] = r
        merged.update({k: v for k, v in r.items() if k.startswith(f"{sub.name}_")})
        tasks_dir = resolve_model_dir(sub) / "tasks"
        specs += [TaskSpec.from_dict(read_json(tasks_dir / t / "adapter_config.json")["task"])
                  for t in r["tasks"]]
    merged["tasks"] = [s.name for s in specs]
    merged.update(sentence_metrics(specs, kept))  # an intent model's and a slot model's together
    merged["avg"] = average_score(specs, merged)
    return merged
