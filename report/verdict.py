"""The verdict on the launch configuration (recommend.py chooses it) against the separate models it
replaces, and the run's calibration.

Its latency ratios come from paired timing (bench/pairs.py), each with its 95% interval and the
word the interval allows; its accuracy gap from the bench's test predictions, with a
paired-bootstrap interval over the test examples (core/stats.py), beside both training budgets and
a study's gap at equal compute. The run's calibration pairs (A/A, identical compute) say whether
the machine was steady enough to trust it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from palkit.bench.pairs import CALIBRATION, calibration_problem, wording
from palkit.bench.schema import measurement_id
from palkit.core.stats import paired_bootstrap, rowwise_accuracy, rowwise_pearson, welch_interval
from palkit.report.ingest import SeedStats, Study
from palkit.report.model import (FLATTEN, INTERNAL, OMIT_IF_NONE, BenchFile, Interval,
                                 Measurements, Note, NoteKind, PairedRatio, Subject,
                                 TaskPredictions, TimedPair, TimingPlan)
from palkit.report.recommend import LAUNCH, LaunchChoice
from palkit.report.selection import source_run
from palkit.trainer.metrics import ratio_terms
from palkit.trainer.tasks import BUILTIN_TASKS

# A study's rows for the launch configuration and the separate models, by its configuration names
# (a configuration rerun with captured CUDA graphs when the first has no test score)
STUDY_SHARED = ("shared", "shared, captured")
STUDY_SEPARATE = ("separate", "separate, captured")


@dataclass(frozen=True)
class SeedAverage:
    mean: float
    n: int
    sd: float | None
    configuration: str


@dataclass(frozen=True)
class EqualComputeGap:
    """A study's shared trunk against its separate models at equal training compute, test
    averages over seeds, with Welch's interval over the seeds where both have several."""
    shared: SeedAverage
    separate: SeedAverage
    gap: float
    interval: Interval | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class PairedGap:
    """One side's average score minus the other's on the same examples, in points."""
    gap: float
    interval: Interval
    tasks: tuple[str, ...]
    examples: int


@dataclass(frozen=True)
class Budgets:
    joint: int | None       # optimizer steps of the run the bundle came from (all its tasks)
    separate: int | None    # ... of the separate models' run (all of them)


@dataclass(frozen=True)
class AccuracyGap:
    split: str
    paired: PairedGap = field(metadata=FLATTEN)
    budgets: Budgets
    equal_compute: EqualComputeGap | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class Verdict:
    """The launch bundle against the separate models: below 1x it is smaller or faster."""
    bundle: str
    versus: str
    runtime: str
    tasks: list[str]
    added_later: list[str]
    added_later_text: str = field(metadata=INTERNAL)    # with their placements, for prose
    size_ratio: float | None
    one_task: PairedRatio | None
    all_tasks: PairedRatio | None
    all_tasks_vs_one: PairedRatio | None
    memory_ratio: float | None
    swap_ms: float | None
    accuracy: AccuracyGap | None


@dataclass(frozen=True)
class CalibrationCheck:
    kind: str
    what: str
    ratio: float
    interval: Interval
    problem: str | None     # why it says the run was noisy
    source: str


@dataclass(frozen=True)
class Calibration:
    """The run's A/A and identical-compute pairs; noisy when either misreads 1.00."""
    pairs: list[CalibrationCheck]
    noisy: bool
    why: list[str]
    not_measured: list[str]
    timing_plan: TimingPlan | None = field(default=None, metadata=OMIT_IF_NONE)


def paired(bench: BenchFile, kinds: tuple[str, ...], num: str) -> PairedRatio | None:
    """The bench's paired estimate of the first pair of `kinds` whose numerator is `num`."""
    for p in bench.pairs:
        if p.kind in kinds and p.num.subject == num and p.ratio is not None and p.interval:
            return PairedRatio(p.ratio, p.interval, wording(list(p.interval)),  # type: ignore
                               p.pairs or 0, p.what, p.id)
    return None


def pair_label(pair: TimedPair) -> str:
    """What a paired ratio compares, naming its subject."""
    return pair.what if pair.num.subject in pair.what else f"{pair.what}: {pair.num.subject}"


def calibration(bench: BenchFile) -> Calibration:
    checks, why = [], []
    for p in bench.pairs:
        if p.kind not in CALIBRATION or p.ratio is None or not p.interval:
            continue
        problem = calibration_problem({"ratio": p.ratio, "interval": list(p.interval)})
        checks.append(CalibrationCheck(p.kind, pair_label(p), p.ratio, p.interval, problem, p.id))
        if problem:
            why.append(f"{pair_label(p)}: {problem}")
    measured = {c.kind for c in checks}
    # A pair the bench could not form (no head-only bundle beside its separate models) leaves
    # the run uncalibrated on it, which is not the same as noisy.
    return Calibration(checks, bool(why), why, [k for k in CALIBRATION if k not in measured],
                       bench.timing_plan)


def _average_score(examples: Mapping[str, TaskPredictions], tasks: list[str],
                   rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """The trainer's average (accuracies, (Pearson + 1) / 2, span F1) in points, per row of
    indices."""
    per_task = []
    for t in tasks:
        spec = BUILTIN_TASKS[t]
        if spec.is_multi_label or spec.is_tagging:
            sums = ratio_terms(spec, examples[t].pred, examples[t].gold)[rows[t]].sum(-2)
            per_task.append(sums[..., 0] / np.maximum(sums[..., 1], 1e-12))
            continue
        pred = np.asarray(examples[t].pred)[rows[t]]
        gold = np.asarray(examples[t].gold)[rows[t]]
        per_task.append((rowwise_pearson(pred, gold) + 1) / 2 if spec.is_regression
                        else rowwise_accuracy(pred, gold))
    return 100 * np.mean(per_task, axis=0)


def paired_gap(a: Mapping[str, TaskPredictions],
               b: Mapping[str, TaskPredictions]) -> PairedGap | None:
    """a's average minus b's on the tasks both scored on the same examples, with the paired
    bootstrap's interval (examples resampled within each task, the same for both sides)."""
    tasks = [t for t in a if t in b and t in BUILTIN_TASKS and list(a[t].gold) == list(b[t].gold)]
    if not tasks:
        return None

    def gap(*rows: np.ndarray) -> np.ndarray:
        by_task = dict(zip(tasks, rows))
        return _average_score(a, tasks, by_task) - _average_score(b, tasks, by_task)
    boot = paired_bootstrap(gap, [len(a[t].gold) for t in tasks])
    return PairedGap(boot.value, (boot.interval[0], boot.interval[1]), tuple(tasks),
                     sum(len(a[t].gold) for t in tasks))


def _budget(bench: BenchFile, subject: Subject) -> int | None:
    """Optimizer steps of the --run the subject's models came from (all its tasks)."""
    run = source_run(bench, subject)
    return bench.accuracy[run].optimizer_steps if run is not None else None


def _accuracy(bench: BenchFile, launch: LaunchChoice, study: Study | None) -> AccuracyGap | None:
    """The bundle's gap to the separate models, both as their runtime runs them."""
    bundle, separate = launch.bundle, launch.versus
    assert bundle is not None and separate is not None
    entry = bench.accuracy.get(bundle.name)
    split = "test" if entry and "test" in entry.splits else "dev"

    def examples(name: str) -> Mapping[str, TaskPredictions]:
        found = bench.accuracy.get(name)
        scores = found.splits.get(split) if found else None
        return scores.examples if scores else {}
    gap = paired_gap(examples(bundle.name), examples(separate.name))
    if gap is None:
        return None
    budgets = Budgets(_budget(bench, bundle), _budget(bench, separate))
    return AccuracyGap(split, gap, budgets, equal_compute(study))


def equal_compute(study: Study | None) -> EqualComputeGap | None:
    """The study's shared trunk against its separate models (the converged study: 7,200 joint
    steps against 3 x 2,400)."""
    def test_average(names: tuple[str, ...]) -> SeedAverage | None:
        for name in names:
            row = study.row(name) if study else None
            if row and row.test_avg:
                avg: SeedStats = row.test_avg
                return SeedAverage(avg.mean, avg.n, avg.sd, name)
        return None
    shared, separate = test_average(STUDY_SHARED), test_average(STUDY_SEPARATE)
    if not shared or not separate:
        return None
    interval = None
    if min(shared.n, separate.n) > 1 and shared.sd is not None and separate.sd is not None:
        low, high = welch_interval(shared.mean, shared.sd, shared.n,
                                   separate.mean, separate.sd, separate.n)
        interval = (low, high)
    return EqualComputeGap(shared, separate, shared.mean - separate.mean, interval)


def verdict(bench: BenchFile, m: Measurements, launch: LaunchChoice,
            study: Study | None = None) -> tuple[Verdict | None, list[Note]]:
    """The launch bundle against the separate models, and a note for each part not measured."""
    if launch.bundle is None or launch.versus is None:
        return None, [launch.why_not] if launch.why_not else []
    name, separate, prefix = launch.bundle.name, launch.versus.name, bench.prefix

    def ratio(a: str, b: str) -> float | None:
        x, y = m.get(a), m.get(b)
        return x / y if x is not None and y else None
    memory = measurement_id(prefix, "memory", name, "model_all_tasks_program")
    if m.get(memory) is None:
        memory = measurement_id(prefix, "memory", name, "model_all_tasks")
    out = Verdict(
        bundle=name, versus=separate, runtime=launch.bundle.runtime,
        tasks=list(launch.bundle.tasks), added_later=launch.added_later,
        added_later_text=launch.added_later_text,
        size_ratio=ratio(measurement_id(prefix, "size", name, "total_bytes"),
                         measurement_id(prefix, "size", separate, "total_bytes")),
        one_task=paired(bench, ("identical_compute", "one_task"), name),
        all_tasks=paired(bench, ("all_tasks",), name),
        all_tasks_vs_one=paired(bench, ("all_vs_one",), name),
        memory_ratio=ratio(memory, measurement_id(prefix, "memory", separate, "model_all_tasks")),
        swap_ms=m.get(measurement_id(prefix, "swap_ms", name)),
        accuracy=_accuracy(bench, launch, study))
    unmeasured = [k for k, v in vars(out).items() if v is None]
    return out, [Note(NoteKind.MISSING, f"recommended configuration: {k} not measured", (LAUNCH,),
                      f"{k} not measured") for k in unmeasured]


# ---- in words -----------------------------------------------------------------------------------

def _times(estimate: PairedRatio | CalibrationCheck | None) -> tuple[str, str]:
    if estimate is None:
        return "–", "not measured"
    low, high = estimate.interval
    reads = estimate.reads if isinstance(estimate, PairedRatio) else ""
    return f"{estimate.ratio:.2f}x [{low:.2f}, {high:.2f}]", reads


def verdict_rows(v: Verdict) -> list[tuple[str, str, str]]:
    """(what, value, what it reads) for each line of the verdict."""
    rows = [("bytes, all its tasks / the separate models",
             "–" if v.size_ratio is None else f"{v.size_ratio:.2f}x", "")]
    for estimate, what in ((v.one_task, "one task / its separate model (identical compute)"),
                           (v.all_tasks, "all tasks on one input / the separate models in turn"),
                           (v.all_tasks_vs_one, "all tasks on one input / one task")):
        rows.append((what, *_times(estimate)))
    rows.append(("memory, all tasks resident / the separate models'",
                 "–" if v.memory_ratio is None else f"{v.memory_ratio:.2f}x", ""))
    rows.append(("adapter swap", "–" if v.swap_ms is None else f"{v.swap_ms:.3g} ms", ""))
    acc = v.accuracy
    if acc is None:
        rows.append(("accuracy gap", "–", "not measured (bench with --splits test)"))
        return rows
    gap, budgets = acc.paired, acc.budgets
    steps = ("budgets unknown" if None in (budgets.joint, budgets.separate) else
             f"{budgets.joint:,} optimizer steps against {budgets.separate:,}"
             + (": unequal" if budgets.joint != budgets.separate else ": equal"))
    rows.append((f"accuracy gap, {acc.split} ({', '.join(gap.tasks)}; {gap.examples:,} "
                 "examples), points",
                 f"{gap.gap:+.1f} [{gap.interval[0]:+.1f}, {gap.interval[1]:+.1f}]", steps))
    equal = acc.equal_compute
    if equal:
        interval = (f" [{equal.interval[0]:+.1f}, {equal.interval[1]:+.1f}]"
                    if equal.interval else "")
        rows.append(("accuracy gap at equal compute (the converged study), test points",
                     f"{equal.gap:+.1f}{interval}", f"{_seeds(equal.shared)} against "
                     f"{_seeds(equal.separate)}; Welch's interval over seeds"))
    return rows


def _seeds(avg: SeedAverage) -> str:
    sd = f" ± {avg.sd:.1f}" if avg.sd is not None else ""
    return f"{avg.mean:.1f}{sd} ({avg.n} seed{'s' if avg.n != 1 else ''})"


def calibration_rows(cal: Calibration) -> list[tuple[str, str, str]]:
    """(what, ratio [interval], steady or why not) per calibration pair."""
    return [(c.what, _times(c)[0], c.problem or "steady") for c in cal.pairs]


def timing_plan_line(plan: TimingPlan) -> str:
    """How the bench's paired timing ended: resolved, or stopped by a cap first."""
    shape = f"Timing plan: {plan.processes} processes x {plan.pairs} pairs"
    band = f"+-{math.expm1(plan.target_halfwidth):.0%}"   # a half-width of the log ratio
    if plan.stopped == "resolved":
        return f"{shape}, stopped: resolved ({band}) after {plan.seconds:.0f} s"
    if plan.stopped == "time cap":
        return (f"{shape}, stopped at the {plan.max_seconds:.0f} s cap: not every ratio "
                f"resolved ({band})")
    return (f"{shape}, stopped at the most processes after {plan.seconds:.0f} s: not every "
            f"ratio resolved ({band})")
