"""Task definitions are data: a kind, the columns to read, the labels, the files per split.

A user adds a task by describing it in a config file (see `TaskSpec.from_dict`); nothing in the
model or the training loop knows task names.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from palkit.core.errors import ConfigError
from palkit.runtime.kinds import KINDS, TASK_KINDS
from palkit.runtime.labels import is_bio_tag

DELIMITERS = {"tab": "\t", "comma": ","}
QUOTINGS = ("csv", "none")

# Task names become folder and file names (run dirs, bundles, the app's menu).
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str
    text_columns: tuple[str, ...]
    label_column: str
    # Class names for classification (label i in the data means labels[i]); None for regression.
    labels: tuple[str, ...] | None = None
    # Inclusive score range for regression.
    score_range: tuple[float, float] | None = None
    # File names relative to the data directory, per split ("train", "dev", "test").
    files: dict[str, str] = field(default_factory=dict)
    # multi_label: what joins a text's labels in the label column.
    label_separator: str = ";"
    # multi_label: a label is predicted when its sigmoid reaches this.
    threshold: float = 0.5
    # The files' field separator: "tab" or "comma".
    delimiter: str = "tab"
    # "csv": a field that starts with '"' is quoted (quotes inside doubled, as spreadsheets write);
    # "none": quotes are ordinary characters (text such as tweets, ATIS).
    quoting: str = "csv"

    def __post_init__(self) -> None:
        where = f"task '{self.name}'"
        if not TASK_NAME.fullmatch(self.name):
            raise ConfigError(f"{where}: a name is 1-64 letters, digits, '_' or '-', starting "
                             "with a letter or digit")
        if self.kind not in TASK_KINDS:
            raise ConfigError(f"{where}: kind '{self.kind}' is not one of {', '.join(TASK_KINDS)}")
        want_texts = KINDS[self.kind].texts
        if len(self.text_columns) != want_texts:
            raise ConfigError(f"{where}: kind {self.kind} needs {want_texts} text column(s), "
                             f"got {list(self.text_columns)}")
        if self.is_regression:
            if self.score_range is None or self.score_range[0] >= self.score_range[1]:
                raise ConfigError(f"{where}: pair_regression needs score_range [low, high]")
        elif self.labels_from_train:
            pass   # read from the train split (`with_labels`)
        elif not self.labels or len(self.labels) < 2:
            raise ConfigError(f"{where}: classification needs at least two labels")
        if self.is_tagging and self.labels is not None:
            bad = [tag for tag in self.labels if not is_bio_tag(tag)]
            if bad or "O" not in self.labels:
                raise ConfigError(f"{where}: token_tagging labels are BIO tags with 'O' among "
                                 f"them ('O', 'B-x', 'I-x'); got {(bad or list(self.labels))[:3]}")
        if self.is_multi_label and not self.label_separator:
            raise ConfigError(f"{where}: label_separator must not be empty")
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"{where}: threshold must lie between 0 and 1, got {self.threshold}")
        if self.delimiter not in DELIMITERS:
            raise ConfigError(f"{where}: delimiter must be one of {', '.join(DELIMITERS)}, got "
                             f"'{self.delimiter}'")
        if self.quoting not in QUOTINGS:
            raise ConfigError(f"{where}: quoting must be one of {', '.join(QUOTINGS)}, got "
                             f"'{self.quoting}'")

    @property
    def is_regression(self) -> bool:
        return KINDS[self.kind].regression

    @property
    def is_pair(self) -> bool:
        return KINDS[self.kind].texts == 2

    @property
    def is_multi_label(self) -> bool:
        return KINDS[self.kind].multi_label

    @property
    def is_tagging(self) -> bool:
        return KINDS[self.kind].per_token

    @property
    def labels_from_train(self) -> bool:
        """A set or tagging task given no labels takes the train split's (`with_labels`)."""
        return self.labels is None and (self.is_multi_label or self.is_tagging)

    @property
    def num_outputs(self) -> int:
        return 1 if self.is_regression else len(self.labels or ())

    @property
    def metric(self) -> str:
        """What the task is judged by: pearson, accuracy (exact set for multi_label) or span f1."""
        return "pearson" if self.is_regression else "f1" if self.is_tagging else "accuracy"

    def with_labels(self, seen: set[str]) -> "TaskSpec":
        """This task with the labels of its train split (`seen`), sorted, when it gives none."""
        if not self.labels_from_train:
            return self
        labels = sorted(seen | {"O"}) if self.is_tagging else sorted(seen)
        if len(labels) < 2:
            raise ConfigError(f"task '{self.name}': its train split has {len(labels)} label(s) "
                             f"({', '.join(labels)}); a task needs at least two")
        return replace(self, labels=tuple(labels))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text_columns": list(self.text_columns),
                "labels": list(self.labels) if self.labels is not None else None,
                "score_range": list(self.score_range) if self.score_range is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskSpec":
        if not isinstance(d, dict):
            raise ConfigError(f"a task description must be an object of fields, got {d!r:.60}")
        known = {"name", "kind", "text_columns", "label_column", "labels", "score_range", "files",
                 "label_separator", "threshold", "delimiter", "quoting"}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"task '{d.get('name', '?')}': unknown field(s) {sorted(unknown)}; "
                             f"known: {sorted(known)}")
        missing = {"name", "kind", "text_columns", "label_column"} - set(d)
        if missing:
            raise ConfigError(f"task '{d.get('name', '?')}': missing field(s) {sorted(missing)}")
        _check_field_types(d)
        return cls(
            name=d["name"], kind=d["kind"], text_columns=tuple(d["text_columns"]),
            label_column=d["label_column"],
            labels=tuple(d["labels"]) if d.get("labels") is not None else None,
            score_range=tuple(d["score_range"]) if d.get("score_range") is not None else None,
            files=dict(d.get("files", {})),
            **{k: d[k] for k in ("label_separator", "threshold", "delimiter", "quoting") if k in d})


def _check_field_types(d: dict[str, Any]) -> None:
    """JSON/TOML can give any type: refuse what the fields cannot hold, naming the field."""
    where = f"task '{d.get('name', '?')}'"

    def strings(key: str, value: Any) -> None:
        if not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            raise ConfigError(f"{where}: '{key}' must be a list of strings, got {value!r:.60}")

    for key in ("name", "kind", "label_column", "label_separator", "delimiter", "quoting"):
        if key in d and not isinstance(d[key], str):
            raise ConfigError(f"{where}: '{key}' must be a string, got {d[key]!r:.60}")
    threshold = d.get("threshold", 0.5)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
        raise ConfigError(f"{where}: 'threshold' must be a number, got {threshold!r:.60}")
    strings("text_columns", d["text_columns"])
    if d.get("labels") is not None:
        strings("labels", d["labels"])
    score_range = d.get("score_range")
    if score_range is not None and not (
            isinstance(score_range, list) and len(score_range) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in score_range)):
        raise ConfigError(f"{where}: 'score_range' must be two numbers, got {score_range!r:.60}")
    files = d.get("files", {})
    if not (isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in files.items())):
        raise ConfigError(f"{where}: 'files' must map split names to file names, got "
                         f"{files!r:.60}")


ATIS_FILES = {"train": "atis/atis-train.tsv", "dev": "atis/atis-dev.tsv",
              "test": "atis/atis-test.tsv"}

# The tasks of the --data-dir folder: the minBERT layout (sst/, quora/, sts/, cfimdb/) and atis/.
BUILTIN_TASKS: dict[str, TaskSpec] = {t.name: t for t in (
    TaskSpec(name="sst", kind="single_classification", text_columns=("sentence",),
             label_column="sentiment",
             labels=("very negative", "negative", "neutral", "positive", "very positive"),
             files={"train": "sst/ids-sst-train.csv", "dev": "sst/ids-sst-dev.csv",
                    "test": "sst/ids-sst-test.csv"}),
    TaskSpec(name="quora", kind="pair_classification", text_columns=("sentence1", "sentence2"),
             label_column="is_duplicate", labels=("not paraphrase", "paraphrase"),
             files={"train": "quora/quora-train.csv", "dev": "quora/quora-dev.csv",
                    "test": "quora/quora-test.csv"}),
    TaskSpec(name="sts", kind="pair_regression", text_columns=("sentence1", "sentence2"),
             label_column="similarity", score_range=(0.0, 5.0),
             files={"train": "sts/sts-train.csv", "dev": "sts/sts-dev.csv",
                    "test": "sts/sts-test.csv"}),
    TaskSpec(name="cfimdb", kind="single_classification", text_columns=("sentence",),
             label_column="sentiment", labels=("negative", "positive"),
             files={"train": "cfimdb/ids-cfimdb-train.csv", "dev": "cfimdb/ids-cfimdb-dev.csv"}),
    # An assistant's intent and slots on one utterance (../shared/data/README.md); labels: the
    # train split's.
    TaskSpec(name="atis_intent", kind="multi_label", text_columns=("words",),
             label_column="intent", files=ATIS_FILES, quoting="none"),
    TaskSpec(name="atis_slots", kind="token_tagging", text_columns=("words",),
             label_column="slots", files=ATIS_FILES, quoting="none"),
)}


def resolve_tasks(names: list[str] | tuple[str, ...],
                  custom: list[dict[str, Any]] | None = None) -> list[TaskSpec]:
    """Look task names up among the config's custom tasks, then the built-in ones."""
    table = {**BUILTIN_TASKS, **{s.name: s for s in map(TaskSpec.from_dict, custom or [])}}
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ConfigError(f"unknown task '{unknown[0]}'; known: {', '.join(sorted(table))} "
                         "(describe new tasks under 'custom_tasks' in a --config file)")
    if len(set(names)) != len(names):
        raise ConfigError(f"task listed twice in {list(names)}")
    return [table[name] for name in names]
