"""Published figures a report quotes beside palkit's own, each with where it was published and
how it differs from what palkit measures."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    name: str
    scores: dict[str, float]   # metric key (as palkit's evaluation names it) -> points
    note: str


# Chen et al. 2019 (arXiv:1902.10909), Table 2, ATIS; palkit's test file is every other
# utterance of that set (../shared/data/atis/README)
JOINTBERT_ATIS = Published(
    "JointBERT (published)",
    {"atis_intent_acc": 97.5, "atis_slots_f1": 96.1, "atis_intent+atis_slots_sentence_acc": 88.2},
    "BERT-base (110M parameters), fp32, the full 893-utterance test set")
