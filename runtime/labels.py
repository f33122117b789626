"""Decoding rules of the set and tagging kinds, one implementation for training's metrics, the
bundle runtime and (mirrored in Java) the app.

Tags are BIO: `O`, `B-type`, `I-type`. Spans follow the CoNLL evaluation (conlleval): a span
starts at `B-x`, or at an `I-x` whose previous tag is neither `B-x` nor `I-x`, and runs over the
`I-x` that follow it. A span is right only when its type and both ends are right.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def is_bio_tag(tag: str) -> bool:
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


@dataclass(frozen=True)
class Span:
    type: str
    start: int   # first word
    end: int     # one past the last word


def bio_spans(tags: Sequence[str]) -> list[Span]:
    """The spans of one sentence's tags (the CoNLL rule above)."""
    spans: list[Span] = []
    kind, start = None, 0
    for i, tag in enumerate(tags):
        inside = tag.startswith("I-") and kind == tag[2:]
        if kind is not None and not inside:
            spans.append(Span(kind, start, i))
            kind = None
        if tag != "O" and not inside:
            kind, start = tag[2:], i
    if kind is not None:
        spans.append(Span(kind, start, len(tags)))
    return spans


@dataclass(frozen=True)
class SpanCounts:
    """One sentence's spans: right (type and both ends), predicted, gold."""
    correct: int
    predicted: int
    gold: int


def span_counts(gold: Sequence[str], predicted: Sequence[str]) -> SpanCounts:
    g, p = set(bio_spans(gold)), set(bio_spans(predicted))
    return SpanCounts(len(g & p), len(p), len(g))


def span_f1(counts: Sequence[SpanCounts]) -> tuple[float, float, float]:
    """Micro precision, recall and F1 over sentences (what conlleval and seqeval report)."""
    correct = sum(c.correct for c in counts)
    predicted = sum(c.predicted for c in counts)
    gold = sum(c.gold for c in counts)
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * correct / (predicted + gold) if predicted + gold else 0.0
    return precision, recall, f1


def first_pieces(word_ids: Sequence[int | None]) -> list[int]:
    """Each word's first token position, from a tokenizer's word index per token (None for
    [CLS]/[SEP]): entry w for word w, -1 for a word with no piece (one the normalizer empties);
    words cut off by the maximum length are not listed."""
    firsts: list[int] = []
    for position, word in enumerate(word_ids):
        if word is not None and word >= len(firsts):
            firsts += [-1] * (word - len(firsts)) + [position]
    return firsts


def word_tags(tag_scores: Sequence[Sequence[float]], firsts: Sequence[int], labels: Sequence[str],
              words: int) -> list[str]:
    """Each word's tag: the best tag at its first piece's row; a word with no piece (emptied by
    the normalizer, or past the maximum length) gets 'O'."""
    tags = ["O" if p < 0 else labels[max(range(len(labels)), key=lambda j: tag_scores[p][j])]
            for p in firsts]
    return tags + ["O"] * (words - len(tags))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def label_set(logits: Sequence[float], labels: Sequence[str], threshold: float) -> tuple[str, ...]:
    """The labels whose sigmoid reaches `threshold`; none reaching it: the most likely one alone
    (a text always has at least one label, as the data has)."""
    chosen = tuple(label for label, x in zip(labels, logits) if sigmoid(x) >= threshold)
    if chosen:
        return chosen
    return (labels[max(range(len(labels)), key=lambda i: logits[i])],)
