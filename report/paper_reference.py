"""The paper's reference: all-layer PALs (Stickland & Murray's setting) against their targets.

A value per summary key, each naming the measurement ids it was computed from ("sources"), the
95% intervals of those timed in pairs, and notes; from the first host file only, at the reference
condition (128 tokens, 1 thread, p50). The targets are checked here, never asserted.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from palkit.bench.schema import measurement_id, p50_id
from palkit.report.model import (OMIT_IF_NONE, BenchFile, Interval, JsonObject, Measurements, Note,
                                 NoteKind, to_json)
from palkit.report.selection import (accuracy_split, pal_groups, plain_subjects, ratio,
                                     reference_condition, size_reference, source_run, task_p50)
from palkit.report.verdict import Budgets, paired

# target: (comparison, bound, what)
TARGETS = {
    "size_ratio_vs_three_separate": ("<=", 0.40, "PAL int8, all three tasks, bytes / three separate int8 models"),
    "size_ratio_vs_one_separate": ("<=", 1.10, "PAL int8 bytes / one separate int8 model"),
    "latency_ratio_pal_vs_plain": ("<=", 1.05, "one all-layer PAL task p50 / plain no-PAL int8 classifier, same runtime"),
    "latency_ratio_pal_vs_best_peer": ("<=", 1.00, "one task p50 / fastest peer"),
    "all_tasks_ratio_all_layers": ("<=", 2.2, "all three tasks on one input / one task (all-layer PALs)"),
    "all_tasks_vs_flop_floor": ("<=", 1.05, "all-layer PALs' all tasks / one task, over its matrix-multiply FLOP floor"),
    "all_tasks_ratio_top_half": ("<=", 1.7, "all three tasks on one input / one task (top-half PALs)"),
    "all_tasks_ratio_best_placement": ("<=", 1.5, "all three tasks / one task, best PAL placement within 1 point of all-layer PALs"),
    "swap_ms": ("<=", 10.0, "adapter swap, ms"),
    "memory_ratio_all_vs_one": ("<=", 1.3, "memory with all three resident / one"),
    "accuracy_gap_pal_int8_vs_separate_fp32": (">=", -1.0, "PAL int8 avg - three separate fp32 avg, points"),
    "accuracy_drop_int8_vs_fp32": ("<=", 0.5, "fp32 avg - int8 avg of the same PAL model, points"),
}
SUMMARY_KEYS = ("machine", "size_ratio_vs_three_separate", "size_ratio_vs_one_separate",
                "latency_ratio_pal_vs_plain", "latency_ratio_pal_vs_best_peer",
                "all_tasks_ratio_all_layers", "all_tasks_vs_flop_floor",
                "all_tasks_ratio_top_half", "swap_ms",
                "memory_ratio_all_vs_one", "accuracy_avg_pal_int8", "accuracy_avg_separate_fp32",
                "accuracy_drop_int8_vs_fp32", "all_tasks_ratio_best_placement",
                "best_placement_accuracy_gap", "flop_floor_pal_vs_plain", "training_steps",
                "intervals", "notes")
# the summary keys that are numbers (the others: machine, training_steps, intervals, notes)
NUMBER_KEYS = tuple(k for k in SUMMARY_KEYS
                    if k not in ("machine", "training_steps", "intervals", "notes"))

NOT_MEASURED = "not measured (the inputs lack what it needs)"
# What fills a key that no host bench file can measure alone
MISSING_INPUT = {
    "all_tasks_ratio_best_placement": "needs the accuracy of several PAL placements trained to "
    "one budget: `palkit report --accuracy FILE` with a study's table (`palkit study-results`, e.g. "
    "results/converged.json) and their bundles benchmarked",
    "best_placement_accuracy_gap": "needs `palkit report --accuracy FILE` (see "
    "all_tasks_ratio_best_placement)",
}


@dataclass(frozen=True)
class PalGroup:
    """PAL bundles of one placement whose all-tasks / one-task ratio has a target."""
    words: str        # as the notes name it
    layers: str       # `--pal-layers` for training one
    run: str


ALL_TASKS_GROUPS = {"all_tasks_ratio_all_layers": PalGroup("all-layer", "all", "runs/default"),
                    "all_tasks_ratio_top_half": PalGroup("top-half", "top", "runs/pals-top")}


@dataclass
class ReferenceSummary:
    """The summary's keys (summary.json's flat keys), the ids each came from, and notes."""
    values: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(NUMBER_KEYS))
    machine: str | None = None
    training_steps: Budgets | None = None
    intervals: dict[str, Interval] | None = None
    notes: list[Note] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)

    def set(self, key: str, value: float | None, ids: list[str]) -> None:
        self.values[key], self.sources[key] = value, ids

    def drop_missing(self, keys: tuple[str, ...]) -> None:
        """Forget the notes that call these keys unmeasured: another input measured them."""
        self.notes = [n for n in self.notes if not any(n.says_missing(k) for k in keys)]

    def to_json(self) -> JsonObject:
        fixed = {"machine": self.machine, "training_steps": self.training_steps,
                 "intervals": self.intervals, "notes": self.notes}
        return {k: to_json(fixed[k] if k in fixed else self.values[k]) for k in SUMMARY_KEYS}


@dataclass(frozen=True)
class TargetCheck:
    value: float | None
    target: str
    met: bool | None
    what: str
    context: str | None = field(default=None, metadata=OMIT_IF_NONE)


def no_host_summary() -> ReferenceSummary:
    return ReferenceSummary(notes=[Note(NoteKind.MISSING, "no host bench file: the headline "
                                        "needs `palkit bench` results")])


@dataclass
class _Reference:
    """The reference of one host file as it is worked out."""
    bench: BenchFile
    m: Measurements
    threads: int
    seq: int
    out: ReferenceSummary = field(default_factory=ReferenceSummary)

    def note(self, kind: NoteKind, text: str) -> None:
        self.out.notes.append(Note(kind, text))

    def note_on(self, kind: NoteKind, key: str, detail: str) -> None:
        self.out.notes.append(Note.on(kind, key, detail))

    def task_p50(self, name: str) -> tuple[float | None, list[str]]:
        return task_p50(self.m, self.bench.prefix, name, self.bench.subjects[name].tasks,
                        self.threads, self.seq)

    def fastest(self, names: list[str]) -> tuple[str | None, float | None, list[str]]:
        timed = [(v, n, ids) for n in names for v, ids in [self.task_p50(n)] if v is not None]
        v, n, ids = min(timed, key=lambda t: t[0], default=(None, None, []))
        return n, v, ids

    def pick(self, role: str) -> list[str]:
        return [n for n, s in self.bench.subjects.items() if s.role == role]

    def set_paired(self, key: str, kinds: tuple[str, ...], subject: str) -> None:
        """The ratio from the bench's paired timing of `subject`, with its interval, where the
        bench measured that pair; else the p50 ratio set before stays."""
        estimate = paired(self.bench, kinds, subject)
        if estimate is not None:
            self.out.set(key, estimate.ratio, [estimate.source])
            self.out.intervals = {**(self.out.intervals or {}), key: estimate.interval}

    def one_task_flops(self, name: str) -> float | None:
        flops = [r.matmul_flops for r in self.bench.results if r.subject == name
                 and r.config.startswith("task:") and r.threads == self.threads
                 and r.seq_len == self.seq]
        return statistics.fmean(flops) if flops and all(flops) else None  # type: ignore


def reference_pal(bench: BenchFile, m: Measurements) -> str | None:
    """The PAL subject the reference speaks for: the fastest all-layer PAL bundle."""
    h = _Reference(bench, m, *reference_condition(bench))
    return h.fastest(pal_groups(bench.subjects)[0])[0]


def paper_reference(bench: BenchFile, m: Measurements) -> ReferenceSummary:
    threads, seq = reference_condition(bench)
    h = _Reference(bench, m, threads, seq)
    subjects = bench.subjects
    h.out.machine = bench.machine.label
    h.note(NoteKind.CONDITION, f"latency ratios at {seq} tokens, {threads} thread(s), p50, mean "
           "over tasks; every other condition is in report.md")
    all_layer, top_half = pal_groups(subjects)
    pal, pal_p50, pal_ids = h.fastest(all_layer)
    if pal is None:
        others = [f"{n} (placement {subjects[n].placement})" for n in h.pick("pal")]
        h.note(NoteKind.MISSING, "no all-layer PAL bundle with latency results: latency, size, "
               "swap and memory headlines are null"
               + (f"; benchmarked: {', '.join(others)}" if others else ""))
    else:
        h.note(NoteKind.SUBJECT, f"PAL subject: {pal} (placement {subjects[pal].placement}; the "
               "fastest all-layer PAL runtime at the reference condition)")
        _latency_ratios(h, pal, pal_p50, pal_ids)
        _size_ratios(h, pal)
        _swap_and_memory(h, pal)
    for key, names in zip(ALL_TASKS_GROUPS, (all_layer, top_half)):
        _all_tasks_ratio(h, key, names)
    _accuracy(h, pal)
    for key in NUMBER_KEYS:
        if key != "flop_floor_pal_vs_plain" and h.out.values[key] is None \
                and not any(key in n.about for n in h.out.notes):
            if key in MISSING_INPUT:
                h.note_on(NoteKind.MISSING, key, MISSING_INPUT[key])
            else:
                h.note_on(NoteKind.UNMEASURED, key, NOT_MEASURED)
    h.note(NoteKind.CONDITION, "accuracy in points (0-100, the trainer's average: accuracies and "
           f"(Pearson+1)/2) on the {accuracy_split(bench)} split")
    return h.out


def _latency_ratios(h: _Reference, pal: str, pal_p50: float | None, pal_ids: list[str]) -> None:
    s = h.bench.subjects[pal]
    plain = plain_subjects(h.bench.subjects, pal)
    key = "latency_ratio_pal_vs_plain"
    if plain:
        v, ids = h.task_p50(plain[0])
        h.out.set(key, ratio(pal_p50, v), pal_ids + ids)
        h.set_paired(key, ("one_task",), pal)
        floor = ratio(h.one_task_flops(pal), h.one_task_flops(plain[0]))
        h.out.set("flop_floor_pal_vs_plain", floor, pal_ids + ids)  # the rows carry their FLOPs
        if floor is not None:
            h.note_on(NoteKind.FLOOR, key, f"one PAL task takes {floor:.3f}x the plain "
                      "classifier's matrix-multiply FLOPs, the floor of this ratio when inference "
                      "is compute-bound")
    else:
        h.note_on(NoteKind.MISSING, key, f"no separate {s.precision} bundles on {s.runtime} were "
                  "benchmarked (export runs/separate and pass them)")
    peer, peer_p50, peer_ids = h.fastest(h.pick("peer"))
    key = "latency_ratio_pal_vs_best_peer"
    if peer:
        h.out.set(key, ratio(pal_p50, peer_p50), pal_ids + peer_ids)
        h.set_paired(key, ("peer",), pal)
        h.note(NoteKind.SUBJECT, f"fastest peer: {peer}")
    else:
        h.note_on(NoteKind.MISSING, key, "no peers measured (pass --run runs/separate)")


def _size_ratios(h: _Reference, pal: str) -> None:
    r = size_reference(h.bench.subjects, pal)
    if r is None:
        h.note(NoteKind.MISSING, f"size ratios: no separate int8 models on "
               f"{h.bench.subjects[pal].runtime} were measured")
        return
    prefix = h.bench.prefix
    total_id = measurement_id(prefix, "size", pal, "total_bytes")
    three_id = measurement_id(prefix, "size", r, "total_bytes")
    per = h.m.starting(measurement_id(prefix, "size", r, "model", ""))
    h.out.set("size_ratio_vs_three_separate", ratio(h.m.get(total_id), h.m.get(three_id)),
              [total_id, three_id])
    if per:
        one = statistics.fmean(h.m.get(i) for i in per)  # type: ignore[misc]
        h.out.set("size_ratio_vs_one_separate", ratio(h.m.get(total_id), one), [total_id, *per])
    h.note(NoteKind.SUBJECT, f"size reference: {r}")


def _all_tasks_ratio(h: _Reference, key: str, names: list[str]) -> None:
    """A runtime with an all-tasks program is how a user runs every task; without one the
    tasks run one after the other."""
    subjects = h.bench.subjects
    candidates = [n for n in names if subjects[n].all_tasks_program] or names
    n = (h.fastest(candidates)[0] or candidates[0]) if candidates else None
    if n is None:
        group = ALL_TASKS_GROUPS[key]
        h.note_on(NoteKind.MISSING, key, f"no {group.words} PAL bundle was benchmarked; train "
                  f"one (`palkit train --pal-layers {group.layers} --out {group.run}`), export "
                  "it and bench it with the others")
        return
    h.note_on(NoteKind.SUBJECT, key, f"subject {n}")
    one, one_ids = h.task_p50(n)
    all_id = p50_id(h.bench.prefix, n, "all_tasks", h.threads, h.seq)
    h.out.set(key, ratio(h.m.get(all_id), one), [all_id, *one_ids])
    h.set_paired(key, ("all_vs_one",), n)
    rows = [r for r in h.bench.results
            if r.subject == n and r.threads == h.threads and r.seq_len == h.seq]
    flops = {r.config: r.matmul_flops for r in rows}
    one_flops = [flops.get(f"task:{t}") for t in subjects[n].tasks]
    if flops.get("all_tasks") and all(one_flops):
        floor = flops["all_tasks"] / statistics.fmean(one_flops)  # type: ignore[arg-type,operator]
        h.note_on(NoteKind.FLOOR, key, f"all tasks take {floor:.2f}x one task's matrix-multiply "
                  "FLOPs, the floor of this ratio when inference is compute-bound")
        if key == "all_tasks_ratio_all_layers":
            h.out.set("all_tasks_vs_flop_floor", ratio(h.out.values[key], floor),
                      h.out.sources[key])
    if any(r.config == "all_tasks" and r.p50_ms is not None and r.all_tasks_mode == "sequential"
           for r in rows):
        h.note_on(NoteKind.CONDITION, key, f"{n} offers no all-tasks program; its tasks ran one "
                  "after the other on the same input")


def _swap_and_memory(h: _Reference, pal: str) -> None:
    prefix = h.bench.prefix
    swap = measurement_id(prefix, "swap_ms", pal)
    h.out.set("swap_ms", h.m.get(swap), [swap])
    one_id = measurement_id(prefix, "memory", pal, "model_one_task")
    all_id = measurement_id(prefix, "memory", pal, "model_all_tasks_program")
    key = "memory_ratio_all_vs_one"
    if h.m.get(all_id) is not None:
        h.note_on(NoteKind.CONDITION, key, "all tasks resident as the bundle's all-tasks program "
                  "(trunk loaded once); report.md also lists the three task programs loaded side "
                  "by side")
    else:
        all_id = measurement_id(prefix, "memory", pal, "model_all_tasks")
    h.out.set(key, ratio(h.m.get(all_id), h.m.get(one_id)), [all_id, one_id])
    h.note(NoteKind.CONDITION, "memory ratio on RSS after loading and one run, above the "
           "process's RSS after imports (the model's own memory; the Python/torch baseline would "
           "flatter the ratio)")


def _accuracy(h: _Reference, pal: str | None) -> None:
    """Averages in points (0-100) of the PAL bundle as its runtime runs it and of the three
    separate fp32 models, and the PAL model's own int8 - fp32 drop."""
    split, prefix = accuracy_split(h.bench), h.bench.prefix

    def acc(name: str) -> tuple[float | None, str]:
        mid = measurement_id(prefix, "accuracy", name, split, "avg")
        return h.m.get(mid), mid

    fp32 = {n: e for n, e in h.bench.accuracy.items() if e.fp32_reference}
    same: list[str] = []  # the PAL bundle's own run, in fp32
    if pal is not None and h.bench.subjects[pal].precision == "int8":
        v, mid = acc(pal)
        h.out.set("accuracy_avg_pal_int8", v, [mid])
        own_run = source_run(h.bench, h.bench.subjects[pal])
        same = [own_run] if own_run is not None else []
        if not same:
            h.note_on(NoteKind.MISSING, "accuracy_drop_int8_vs_fp32",
                      "the PAL bundle's own run was not among --run")
        elif v is not None and acc(same[0])[0] is not None:
            f, fid = acc(same[0])
            h.out.set("accuracy_drop_int8_vs_fp32", f - v, [fid, mid])  # type: ignore[operator]
    separate = [n for n, e in fp32.items() if e.kind == "separate"]
    if separate:
        v, mid = acc(separate[0])
        h.out.set("accuracy_avg_separate_fp32", v, [mid])
    if same and separate:
        h.out.training_steps = Budgets(fp32[same[0]].optimizer_steps,
                                       fp32[separate[0]].optimizer_steps)


def check_targets(summary: ReferenceSummary) -> dict[str, TargetCheck]:
    values = dict(summary.values)
    a, b = values.get("accuracy_avg_pal_int8"), values.get("accuracy_avg_separate_fp32")
    values["accuracy_gap_pal_int8_vs_separate_fp32"] = a - b if a is not None and b is not None else None
    out = {}
    for key, (op, bound, what) in TARGETS.items():
        v = values.get(key)
        met = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out[key] = TargetCheck(v, f"{op} {bound}", met, what, _target_context(key, summary))
    return out


def _target_context(key: str, summary: ReferenceSummary) -> str | None:
    """What to read beside a target's value: the FLOP floor of the PAL/plain latency ratio, and
    whether the accuracy gap compares equal training budgets."""
    floor = summary.values.get("flop_floor_pal_vs_plain")
    if key == "latency_ratio_pal_vs_plain" and floor is not None:
        return f"its matrix-multiply FLOP floor is {floor:.3f}x"
    steps = summary.training_steps
    if key == "accuracy_gap_pal_int8_vs_separate_fp32" and steps:
        if steps.joint is None or steps.separate is None:
            return "training budgets unknown"
        if steps.joint != steps.separate:
            return (f"unequal budgets: the joint run took {steps.joint:,} optimizer steps for all "
                    f"its tasks, the separate models {steps.separate:,} in all")
        return f"equal budgets ({steps.joint:,} optimizer steps)"
    return None
