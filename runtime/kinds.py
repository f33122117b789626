"""What a task can be: each kind palkit trains, exports and runs, and what a task of it reads and
returns. The trainer's task specs, the bundle's manifest and the app read kinds from here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskKind:
    name: str
    texts: int           # text columns a task reads: 1, or 2 for a sentence pair
    regression: bool     # one score in a range; else one logit per label


KINDS = {k.name: k for k in (
    TaskKind("single_classification", texts=1, regression=False),
    TaskKind("pair_classification", texts=2, regression=False),
    TaskKind("pair_regression", texts=2, regression=True),
)}
TASK_KINDS = tuple(KINDS)
