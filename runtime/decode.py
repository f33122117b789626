"""A task's outputs as the user reads them: a label with its probabilities, or a score."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from palkit.runtime.manifest import TaskEntry


@dataclass
class Prediction:
    task: str
    outputs: list[float]          # logits, or [score] for regression
    label: str | None = None      # classification
    probabilities: list[float] | None = None
    score: float | None = None    # regression
    tokens: int = 0
    latency_ms: float = 0.0
    swap_ms: float = 0.0

    def summary(self) -> str:
        if self.score is not None:
            return f"{self.task}: score {self.score:.3f}"
        p = max(self.probabilities or [0.0])
        return f"{self.task}: {self.label} ({p:.0%})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}



def make_prediction(info: TaskEntry, out: np.ndarray, tokens: int, ms: float,
                    swap_ms: float) -> Prediction:
    outs = [float(x) for x in out]
    if info.is_regression:
        return Prediction(info.name, outs, score=outs[0], tokens=tokens, latency_ms=ms,
                          swap_ms=swap_ms)
    e = np.exp(out - out.max())
    probs = e / e.sum()
    return Prediction(info.name, outs, label=(info.labels or [])[int(out.argmax())],
                      probabilities=[float(p) for p in probs], tokens=tokens, latency_ms=ms,
                      swap_ms=swap_ms)
