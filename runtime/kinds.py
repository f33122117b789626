"""What a task can be: each kind palkit trains, exports and runs, and what a task of it reads and
returns. The trainer's task specs, the bundle's manifest and the app read kinds from here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskKind:
    name: str
    texts: int                 # text columns a task reads: 1, or 2 for a sentence pair
    regression: bool = False   # one score in a range; else one logit per label
    multi_label: bool = False  # a set of labels: one sigmoid per label against a threshold
    per_token: bool = False    # one tag per word (BIO), read from the word's first word piece

    @property
    def decoding(self) -> str:
        """How outputs become an answer (runtime/labels.py; the app's Java mirrors it)."""
        if self.regression:
            return "score"
        if self.multi_label:
            return "sigmoid_threshold"
        return "first_piece_bio_spans" if self.per_token else "argmax"


KINDS = {k.name: k for k in (
    TaskKind("single_classification", texts=1),
    TaskKind("pair_classification", texts=2),
    TaskKind("pair_regression", texts=2, regression=True),
    TaskKind("multi_label", texts=1, multi_label=True),
    TaskKind("token_tagging", texts=1, per_token=True),
)}
TASK_KINDS = tuple(KINDS)
