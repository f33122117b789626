"""What the report recommends, decided here and nowhere else, from what the files record:

- the launch configuration: the multi-task bundle whose trunk holds no PALs (the shared trunk; a
  task added later may bring its own PALs), int8 and ExecuTorch first, against the separate
  models of its runtime and precision (bench subjects' role, PAL layers, task adapter kinds);
- how to add a task later: the fewest-bytes adapter within WITHIN_POINTS of joint training for
  every left-out task of the leave-one-out study (each adapter's kind and placement);
- what to ship for all tasks on every input and for one task at a time, and the best PAL
  placement, among a study's configurations within WITHIN_POINTS of all-layer PALs (each
  frontier point with its bundle's recorded PAL layers). Latencies within LATENCY_TIE of the
  fastest tie (a shared host's bench runs move by about that much), won by fewer bundle bytes.

Never from a bundle's name or a note's text: names only join a study's rows to the bundles
benched for them.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from palkit.report.ingest import AdapterSpec, LaterTaskRow
from palkit.report.model import INTERNAL, OMIT_IF_NONE, BenchFile, Note, NoteKind, Subject

if TYPE_CHECKING:
    from palkit.report.frontier import FrontierPoint

WITHIN_POINTS = 1.0
LATENCY_TIE = 0.05
# The study's all-layer PAL configuration (the paper's setting), which the frontier's accuracy
# bound is measured from
REFERENCE_CONFIGURATION = "pals-annealed"
# The summary keys the frontier fills; the paper's reference leaves them to it
PLACEMENT_KEYS = ("all_tasks_ratio_best_placement", "best_placement_accuracy_gap")
LAUNCH = "recommended"    # what notes about the launch configuration are about
ADD_TASK = "add_task"     # what notes about adding a task are about


# ---- the launch configuration -------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchChoice:
    """The bundle to launch with and the separate models it replaces, or why there is none."""
    bundle: Subject | None
    versus: Subject | None
    why_not: Note | None = None

    @property
    def added_later(self) -> list[str]:
        """The bundle's tasks that bring their own PALs: tasks added to the shipped trunk."""
        adapters = self.bundle.adapters if self.bundle else {}
        return sorted(t for t, a in adapters.items() if a.kind == "pal")

    @property
    def added_later_text(self) -> str:
        """Those tasks with their placements: "cfimdb (top-1 PALs)"."""
        adapters = self.bundle.adapters if self.bundle else {}
        return ", ".join(f"{t} ({adapters[t].placement} PALs)" for t in self.added_later)


def launch_bundle(subjects: Mapping[str, Subject]) -> Subject | None:
    """The multi-task bundle with no PALs in its trunk, int8 and ExecuTorch first."""
    found = [s for s in subjects.values()
             if s.role == "pal" and s.placement == "none" and len(s.tasks) > 1]
    found.sort(key=lambda s: (s.precision != "int8", s.runtime != "executorch"))
    return found[0] if found else None


def separate_models_for(subjects: Mapping[str, Subject], bundle: Subject) -> Subject | None:
    """The separate models on the bundle's runtime and precision."""
    return next((s for s in subjects.values() if s.role == "separate"
                 and s.runtime == bundle.runtime and s.precision == bundle.precision), None)


def choose_launch(bench: BenchFile) -> LaunchChoice:
    bundle = launch_bundle(bench.subjects)
    if bundle is None:
        return LaunchChoice(None, None, _launch_missing(
            "no multi-task bundle without PALs in its trunk was benched (`palkit train --mode "
            "shared`, export it, bench it)"))
    versus = separate_models_for(bench.subjects, bundle)
    if versus is None:
        return LaunchChoice(bundle, None, _launch_missing(
            f"no separate models on {bundle.runtime} were benched beside {bundle.name} (add "
            "bundles/separate/*)"))
    return LaunchChoice(bundle, versus)


def _launch_missing(why: str) -> Note:
    return Note(NoteKind.MISSING, f"recommended configuration: {why}", (LAUNCH,), why)


# ---- a task added later -------------------------------------------------------------------------

@dataclass(frozen=True)
class AdapterSummary:
    """One adapter's rows of the leave-one-out study."""
    adapter: str
    vs_joint: dict[str, float]       # mean change against joint training, per left-out task
    within: list[str]                # the left-out tasks within WITHIN_POINTS
    adapter_bytes: int
    share_of_trunk: float
    later_vs_separate: float | None  # the task added to all of them, against its own model
    spec: AdapterSpec = field(metadata=INTERNAL)


@dataclass
class AddTaskAdvice:
    file: str | None
    adapter: str | None
    adapters: list[AdapterSummary]
    notes: list[Note]
    left_out_tasks: list[str] | None = field(default=None, metadata=OMIT_IF_NONE)


def adapter_summary(spec: AdapterSpec, rows: list[LaterTaskRow]) -> AdapterSummary:
    left_out: dict[str, list[float]] = {}
    for r in rows:
        if r.vs_joint is not None:
            left_out.setdefault(r.task, []).append(r.vs_joint)
    vs_joint = {t: round(statistics.fmean(v), 2) for t, v in sorted(left_out.items())}
    later = [r.vs_separate for r in rows if r.vs_joint is None]
    return AdapterSummary(
        spec.name, vs_joint, sorted(t for t, d in vs_joint.items() if d >= -WITHIN_POINTS),
        round(statistics.fmean(r.adapter_bytes for r in rows)),
        round(statistics.fmean(r.share_of_trunk for r in rows), 4),
        round(statistics.fmean(later), 2) if later else None, spec)


def add_task_options(spec: AdapterSpec) -> str:
    """`palkit add-task`'s options for an adapter."""
    return "--adapter head" if spec.kind == "head" else f"--adapter pal --pal-layers {spec.placement}"


def advise_add_task(rows: list[LaterTaskRow] | None, file: str | None) -> AddTaskAdvice:
    """The cheapest adapter within WITHIN_POINTS of joint training on every left-out task so far
    (the study writes its rows as they finish), and each adapter's means."""
    if rows is None:
        why = ("not measured (give --later-tasks FILE, a leave-one-out study such as "
               "results/later-tasks.json in palkit's repository)")
        return AddTaskAdvice(None, None, [], [Note(NoteKind.MISSING, f"how to add a task: {why}",
                                                   (ADD_TASK,), why)])
    groups: dict[AdapterSpec, list[LaterTaskRow]] = {}
    for r in rows:
        groups.setdefault(r.adapter, []).append(r)
    adapters = sorted((adapter_summary(a, g) for a, g in groups.items()),
                      key=lambda a: a.adapter_bytes)
    left_out = sorted({t for a in adapters for t in a.vs_joint})
    eligible = [a for a in adapters if left_out and a.within == left_out]
    advice = AddTaskAdvice(file, eligible[0].adapter if eligible else None, adapters,
                           [_add_task_advice(eligible, adapters, left_out)], left_out)
    advice.notes.append(Note(NoteKind.CONDITION, "adapters by bytes: " + "; ".join(
        f"{a.adapter} {a.adapter_bytes:,} B, within for {len(a.within)}/{len(left_out)} "
        "left-out tasks" + ("" if len(a.vs_joint) == len(left_out) else
                            f" ({len(a.vs_joint)} run so far)") for a in adapters), (ADD_TASK,)))
    return advice


def _add_task_advice(eligible: list[AdapterSummary], adapters: list[AdapterSummary],
                     left_out: list[str]) -> Note:
    if eligible:
        best = eligible[0]
        later = (f"; on the task added to all three, {best.later_vs_separate:+.2f} against its "
                 "separate model" if best.later_vs_separate is not None else "")
        return Note(NoteKind.ADVICE, f"how to add a task: {best.adapter}, `palkit add-task RUN "
                    f"--task T {add_task_options(best.spec)}` (the cheapest within "
                    f"{WITHIN_POINTS} point of joint training for every left-out task, "
                    f"{', '.join(left_out)}: worst {min(best.vs_joint.values()):+.2f}; "
                    f"{best.adapter_bytes:,} bytes, {100 * best.share_of_trunk:.2f}% of the "
                    f"trunk{later})", (ADD_TASK,))
    closest = max(adapters, key=lambda a: min(a.vs_joint.values(), default=-1e9), default=None)
    near = (f"; closest: {closest.adapter} (" + ", ".join(
        f"{t} {d:+.2f}" for t, d in closest.vs_joint.items()) + ")"
        if closest and closest.vs_joint else "")
    return Note(NoteKind.ADVICE, f"how to add a task: no adapter is within {WITHIN_POINTS} point "
                f"of joint training for every left-out task{near}", (ADD_TASK,))


# ---- what to ship, from the deployment frontier -------------------------------------------------

@dataclass
class ShipChoice:
    """The configurations to ship, and the best PAL placement's summary keys."""
    all_tasks: str | None = None
    one_task: str | None = None
    best_placement: str | None = None
    all_tasks_ratio_best_placement: float | None = None
    best_placement_accuracy_gap: float | None = None
    notes: list[Note] = field(default_factory=list)

    def summary_notes(self) -> list[Note]:
        """What the summary says of the choice, beside the frontier's own notes."""
        notes = list(self.notes)
        if self.best_placement:
            notes.append(Note(NoteKind.ADVICE, "best placement (all tasks / one task, within "
                              f"the accuracy bound): {self.best_placement}", PLACEMENT_KEYS))
        if self.all_tasks or self.one_task:
            notes.append(Note(NoteKind.ADVICE, "recommended for all tasks on every input: "
                              f"{self.all_tasks or '—'}; for one task at a time: "
                              f"{self.one_task or '—'}"))
        return notes


def _fastest_then_smallest(points: list[FrontierPoint],
                           latency: Callable[[FrontierPoint], float]) -> str:
    """The fastest point, or among those within LATENCY_TIE of it the one with fewest bytes."""
    best = min(latency(p) for p in points)
    tied = [p for p in points if latency(p) <= best * (1 + LATENCY_TIE)]
    return min(tied, key=lambda p: (p.bundle_bytes or float("inf"), latency(p))).name


def choose_shipping(points: list[FrontierPoint], split: str, condition: str) -> ShipChoice:
    """From the frontier's points: the fastest within the accuracy bound for all tasks and for
    one task, and among the bundles with PALs in their trunk the lowest all-tasks / one-task."""
    out = ShipChoice()
    reference = next((p for p in points if p.name == REFERENCE_CONFIGURATION), None)
    if reference is None:
        why = f"no '{REFERENCE_CONFIGURATION}' bundle benched: nothing to compare against"
        out.notes.append(Note(NoteKind.MISSING, why, PLACEMENT_KEYS, why))
        return out
    eligible = [p for p in points if p.accuracy >= reference.accuracy - WITHIN_POINTS]
    timed = [p for p in eligible if p.all_tasks_ms is not None]
    if timed:
        out.all_tasks = _fastest_then_smallest(timed, lambda p: p.all_tasks_ms)  # type: ignore
    out.one_task = _fastest_then_smallest(eligible, lambda p: min(
        (v for v in p.one_task_ms.values() if v is not None), default=float("inf")))
    placements = [p for p in timed if p.placement != "none"]   # PALs in the trunk, as recorded
    if placements:
        best = min(placements, key=lambda p: p.all_tasks_ratio or float("inf"))
        out.best_placement = best.name
        out.all_tasks_ratio_best_placement = best.all_tasks_ratio
        out.best_placement_accuracy_gap = round(best.accuracy - reference.accuracy, 2)
    out.notes.append(Note(NoteKind.CONDITION, (
        f"accuracy: {split} average in points (mean over the study's seeds); eligible: within "
        f"{WITHIN_POINTS} point of {REFERENCE_CONFIGURATION} ({reference.accuracy:.1f}); "
        f"latency p50 at {condition}; latencies within {LATENCY_TIE:.0%} of the "
        "fastest are a tie, won by the fewer bundle bytes")))
    return out
