"""Which task trains at each step (Stickland & Murray, section 4.1), and which examples it sees.

Everything is a pure function of (seed, epoch, step) or (seed, task, pass), so a resumed run
replays exactly the same task order and batches as an uninterrupted one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def sampling_alpha(sampling: str, epoch: int, epochs: int) -> float | None:
    """The exponent in p_t ∝ N_t^α for 1-based `epoch`; None for round-robin."""
    if sampling == "annealed":
        return 1.0 - 0.8 * (epoch - 1) / max(1, epochs - 1)
    return {"round-robin": None, "proportional": 1.0, "sqrt": 0.5}[sampling]  # config-checked


def task_probabilities(sizes: list[int], alpha: float | None) -> list[float]:
    if alpha is None:
        return [1.0 / len(sizes)] * len(sizes)
    weights = [n ** alpha for n in sizes]
    total = sum(weights)
    return [w / total for w in weights]


def epoch_task_schedule(sampling: str, sizes: list[int], epoch: int, epochs: int,
                        steps: int, seed: int) -> list[int]:
    """The task index trained at each step of one epoch."""
    if sampling == "round-robin":
        return [(i % len(sizes)) for i in range(steps)]
    probs = torch.tensor(task_probabilities(sizes, sampling_alpha(sampling, epoch, epochs)))
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.multinomial(probs, steps, replacement=True, generator=gen).tolist()


@dataclass(frozen=True)
class LengthBuckets:
    """Batches of similar length, so that a batch pads little: each run of `group` batches of a
    shuffled pass is sorted by length, cut into batches, and those batches are shuffled."""
    lengths: list[int]   # tokens of each example
    batch: int           # examples per (global) batch
    group: int           # batches sorted together

    def arrange(self, order: list[int], first: int, gen: torch.Generator) -> list[int]:
        """`order` rearranged; its first `first` indices complete the previous pass's last batch
        and stay where they are, so batches line up with the runs sorted here."""
        out, span = order[:first], self.batch * self.group
        for start in range(first, len(order), span):
            run = sorted(order[start:start + span], key=self.lengths.__getitem__)
            batches = [run[i:i + self.batch] for i in range(0, len(run), self.batch)]
            for b in torch.randperm(len(batches), generator=gen).tolist():
                out += batches[b]
        return out


class TaskStream:
    """An endless, reshuffled-per-pass stream of example indices for one task; its only state is
    how many indices were drawn, so it is saved as one integer."""

    def __init__(self, size: int, seed: int, task_index: int, drawn: int = 0,
                 buckets: LengthBuckets | None = None):
        self.size, self.seed, self.task_index, self.drawn = size, seed, task_index, drawn
        self.buckets = buckets
        self._pass, self._order = -1, []

    def _order_of_pass(self, p: int) -> list[int]:
        if p != self._pass:
            gen = torch.Generator().manual_seed(self.seed * 7919 + self.task_index * 104_729 + p)
            order = torch.randperm(self.size, generator=gen).tolist()
            if self.buckets is not None:
                first = -(p * self.size) % self.buckets.batch
                order = self.buckets.arrange(order, min(first, self.size), gen)
            self._pass, self._order = p, order
        return self._order

    def take(self, n: int) -> list[int]:
        out = [self._order_of_pass(d // self.size)[d % self.size]
               for d in range(self.drawn, self.drawn + n)]
        self.drawn += n
        return out
