"""A task's outputs as the user reads them: a label with its probabilities, a score, a set of
labels with their sigmoids, or tagged spans of the text's words."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from palkit.runtime.labels import bio_spans, label_set, sigmoid, word_tags
from palkit.runtime.manifest import TaskEntry
from palkit.runtime.tokenizer import Words


@dataclass
class Prediction:
    task: str
    outputs: list[float] | list[list[float]]   # logits, [score], or a row of tag logits per token
    label: str | None = None      # classification
    probabilities: list[float] | None = None
    score: float | None = None    # regression
    labels: dict[str, float] | None = None     # multi_label: the chosen labels' sigmoids
    tags: list[str] | None = None               # token_tagging: one per word
    spans: list[dict[str, Any]] | None = None   # token_tagging: {"type", "text", "start", "end"}
    tokens: int = 0
    latency_ms: float = 0.0
    swap_ms: float = 0.0

    def summary(self) -> str:
        if self.score is not None:
            return f"{self.task}: score {self.score:.3f}"
        if self.labels is not None:
            return f"{self.task}: " + ", ".join(f"{k} ({v:.0%})" for k, v in self.labels.items())
        if self.spans is not None:
            found = ", ".join(f"'{s['text']}' {s['type']}" for s in self.spans)
            return f"{self.task}: {found or 'no spans'}"
        p = max(self.probabilities or [0.0])
        return f"{self.task}: {self.label} ({p:.0%})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def make_prediction(info: TaskEntry, out: np.ndarray, tokens: int, ms: float,
                    swap_ms: float, words: Words | None = None) -> Prediction:
    """`out` is the task's rows (TaskEntry.rows); a tagging task also needs the text's `words`."""
    timing = {"tokens": tokens, "latency_ms": ms, "swap_ms": swap_ms}
    labels = info.labels or []
    if info.is_tagging:
        assert words is not None, "a tagging task's prediction needs the text's words"
        # row 1 + p of the bundle's output is token p; `out` starts at row 1
        tags = word_tags(out.tolist(), words.first_pieces, labels, len(words.words))
        spans = [{"type": s.type, "text": " ".join(words.words[s.start:s.end]),
                  "start": s.start, "end": s.end} for s in bio_spans(tags)]
        return Prediction(info.name, out.tolist(), tags=tags, spans=spans, **timing)
    outs = [float(x) for x in out]
    if info.is_regression:
        return Prediction(info.name, outs, score=outs[0], **timing)
    if info.is_multi_label:
        chosen = label_set(outs, labels, float(info.threshold or 0.5))
        return Prediction(info.name, outs, labels={name: sigmoid(outs[labels.index(name)])
                                                   for name in chosen}, **timing)
    e = np.exp(out - out.max())
    probs = e / e.sum()
    return Prediction(info.name, outs, label=labels[int(out.argmax())],
                      probabilities=[float(p) for p in probs], **timing)
