"""Paired timing: the ratios the verdict quotes, each measured as two programs against each other.

A machine's speed drifts (turbo, throttling, a neighbour on a shared VM): medians of processes
taken minutes apart read identical programs 10-13% apart (docs/benchmarking.md). Here both sides
of a ratio are loaded in one worker process and called in alternating short blocks (A then B,
then B then A, ...), so drift lands on both alike and cancels in each pair's ratio. Each ratio
is timed in several such processes (bench/plan.py decides how many): a process's own layout
(memory, caches, threads) shifts its ratio a little, by up to 5% in one of fifteen ExecuTorch
A/A processes here, and that must show in the interval too.

The estimate is the Hodges-Lehmann median of all the pairs' log ratios (core/stats.py): robust to
the outlier blocks a busy machine produces, deterministic. Its 95% interval is the wider of two:
within processes, the Wilcoxon signed-rank interval of all pairs; between processes, a t interval
over the processes' own estimates. docs/benchmarking.md says why, and why not others.

Two pairs calibrate each run: an A/A pair (one program as both sides, two loads) and a pair of
identical compute (a shared-trunk task, a head on the trunk, against the separate model of that
task). Both should read 1.00; a run where either reads outside LEVEL_BAND or has an interval
wider than CALIBRATION_WIDTH is flagged as noisy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from palkit.core.stats import hodges_lehmann, t_halfwidth

LEVEL_BAND = 0.03         # "level" when the interval lies within 1.00 +- 3%
CALIBRATION_WIDTH = 0.05  # a calibration pair's interval wider than +- 5% flags a noisy run
# A ratio's interval is narrow enough when its half-width in log terms, log(high / low) / 2, is
# at most log(1 + LEVEL_BAND): the interval spans at most its estimate x/ 1.03, the same
# whichever side is the numerator, and one that meets it centred on 1.00 reads "level".
TARGET_HALFWIDTH = math.log(1 + LEVEL_BAND)
CALIBRATION = ("aa", "identical_compute")


@dataclass(frozen=True)
class Side:
    subject: str
    config: str           # "task:<name>" or "all_tasks"


@dataclass(frozen=True)
class Pair:
    """A ratio the verdict quotes: `num`'s time over `den`'s."""
    kind: str             # aa | identical_compute | one_task | all_tasks | all_vs_one | peer
    num: Side
    den: Side
    what: str

    @property
    def id(self) -> str:
        return (f"pair:{self.kind}:{self.num.subject}:{self.num.config}"
                f"/{self.den.subject}:{self.den.config}")


def paired_ratio(processes: list[tuple[list[float], list[float]]]) -> dict[str, Any]:
    """num/den from each process's paired block timings (num_ms, den_ms): the Hodges-Lehmann
    estimate over all pairs, and the wider of the within-process (Wilcoxon) and the
    between-process (t over the processes' own estimates) 95% intervals."""
    per_process = [[math.log(n / d) for n, d in zip(num, den)] for num, den in processes]
    pooled = hodges_lehmann([x for logs in per_process for x in logs])
    own = [hodges_lehmann(logs).value for logs in per_process]
    half = t_halfwidth(own)
    low, high = min(pooled.interval[0], pooled.value - half), \
        max(pooled.interval[1], pooled.value + half)
    return {"ratio": math.exp(pooled.value), "interval": [math.exp(low), math.exp(high)],
            "pairs": sum(map(len, per_process)), "processes": len(own),
            "process_ratios": [math.exp(x) for x in own]}


def log_halfwidth(interval: list[float]) -> float:
    """Half the width of a ratio's interval in log terms (TARGET_HALFWIDTH's measure)."""
    low, high = interval
    return math.log(high / low) / 2


def wording(interval: list[float]) -> str:
    """What a ratio's interval lets the report say about the numerator."""
    low, high = interval
    if low >= 1 - LEVEL_BAND and high <= 1 + LEVEL_BAND:
        return "level"
    if low > 1 + LEVEL_BAND:
        return "slower"
    if high < 1 - LEVEL_BAND:
        return "faster"
    return "not resolved"


def calibration_problem(estimate: dict[str, Any]) -> str | None:
    """Why a calibration pair (true ratio 1.00) says the run was noisy, or None."""
    r, (low, high) = estimate["ratio"], estimate["interval"]
    if abs(r - 1) > LEVEL_BAND:
        return f"reads {r:.3f}, outside 1.00 +- {LEVEL_BAND:.0%}"
    if (high - low) / 2 > CALIBRATION_WIDTH:
        return f"its interval [{low:.3f}, {high:.3f}] is wider than +- {CALIBRATION_WIDTH:.0%}"
    return None


def _head_only_task(subject: Any, tasks: list[str]) -> str | None:
    """A task the subject runs as a head on the plain trunk: the same compute as a separate model
    of that task. ExecuTorch runs each placement as its own method; ONNX Runtime's one graph
    carries the union of the bundle's PAL placements for every task, so there a head-only task
    does a separate model's compute only when no task of the bundle has PALs."""
    adapters = subject.extra.get("task_adapters", {})
    kinds = {(adapters.get(t) or {}).get("kind") for t in subject.tasks}
    if subject.runtime == "onnxruntime" and kinds != {"head"}:
        return None
    return next((t for t in tasks if (adapters.get(t) or {}).get("kind") == "head"), None)


def verdict_pairs(subjects: list[Any]) -> list[Pair]:
    """Per runtime: the A/A pair, and for each multi-task bundle against the separate models of
    the same runtime and precision, one task (a pair of identical compute where the bundle runs
    that task as a head only), all tasks on one input, all tasks against one, and a peer of the
    same runtime."""
    pairs: list[Pair] = []
    for runtime in dict.fromkeys(s.runtime for s in subjects):
        here = [s for s in subjects if s.runtime == runtime]
        separate = next((s for s in here if s.role == "separate"), None)
        if separate is None:
            continue
        first = next(iter(separate.tasks))
        pairs.append(Pair("aa", Side(separate.name, f"task:{first}"),
                          Side(separate.name, f"task:{first}"),
                          f"{separate.name} against itself (A/A)"))
        for bundle in (s for s in here if s.role == "pal" and s.precision == separate.precision):
            common = [t for t in bundle.tasks if t in separate.tasks]
            if not common:
                continue
            head = _head_only_task(bundle, common)
            task = head or common[0]
            pairs.append(Pair("identical_compute" if head else "one_task",
                              Side(bundle.name, f"task:{task}"),
                              Side(separate.name, f"task:{task}"),
                              f"one task ({task}) of {bundle.name} / its separate model"))
            if len(bundle.tasks) > 1:
                pairs.append(Pair("all_tasks", Side(bundle.name, "all_tasks"),
                                  Side(separate.name, "all_tasks"),
                                  f"all tasks of {bundle.name} on one input / the separate "
                                  "models in turn"))
                pairs.append(Pair("all_vs_one", Side(bundle.name, "all_tasks"),
                                  Side(bundle.name, f"task:{task}"),
                                  f"all tasks of {bundle.name} on one input / one task ({task})"))
            peer = next((s for s in here if s.role == "peer" and task in s.tasks), None)
            if peer is not None:
                pairs.append(Pair("peer", Side(bundle.name, f"task:{task}"),
                                  Side(peer.name, f"task:{task}"),
                                  f"one task ({task}) of {bundle.name} / {peer.name}"))
    return pairs
