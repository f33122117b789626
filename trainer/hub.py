"""The built-in tasks from the Hugging Face hub, for users who are online (`--data-source hub`).

Not exercised by the tests (no network here); the local files are the tested path. Hub splits
differ from the minBERT files: GLUE keeps its test labels private, so `test` is unavailable there.
"""
from __future__ import annotations

from palkit.core.errors import DataError
from palkit.trainer.data import Example
from palkit.trainer.tasks import TaskSpec

# task -> (dataset, config, {our split: hub split}, text fields, label field)
HUB_SOURCES = {
    "sst": ("SetFit/sst5", None, {"train": "train", "dev": "validation", "test": "test"},
            ("text",), "label"),
    "quora": ("glue", "qqp", {"train": "train", "dev": "validation"},
              ("question1", "question2"), "label"),
    "sts": ("glue", "stsb", {"train": "train", "dev": "validation"},
            ("sentence1", "sentence2"), "label"),
    "cfimdb": ("imdb", None, {"train": "train", "dev": "test"}, ("text",), "label"),
}


def read_hub_examples(task: TaskSpec, split: str) -> list[Example]:
    if task.name not in HUB_SOURCES:
        raise DataError(f"task '{task.name}' has no hub source; use local files (--data-source files)")
    name, config, splits, text_fields, label_field = HUB_SOURCES[task.name]
    if split not in splits:
        raise DataError(f"{name}/{config or ''} has no labelled '{split}' split for task '{task.name}'")
    try:
        from datasets import load_dataset
    except ImportError:
        raise DataError("--data-source hub needs the `datasets` package: "
                        "pip install 'palkit[hub]'") from None
    rows = load_dataset(name, config, split=splits[split])
    return [Example(tuple(str(r[f]).strip() for f in text_fields), float(r[label_field]))
            for r in rows if all(str(r[f]).strip() for f in text_fields)]
