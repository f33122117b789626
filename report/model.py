"""The report's data, typed: what a bench file and a phone's file record (ingest.py reads their
JSON into these classes, and nothing else in the report reads that JSON), the measurements every
figure is traced to, paired ratios with the word their interval allows, and notes.

`to_json` writes any of these as report.json and summary.json hold them: a dataclass as an object
of its fields in order, a field marked OMIT_IF_NONE only when it has a value.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Literal, Union

from palkit.bench.pairs import Side

JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]
Interval = tuple[float, float]
Reading = Literal["level", "faster", "slower", "not resolved"]
# A field the JSON holds only when it has a value.
OMIT_IF_NONE = {"omit_if_none": True}
INTERNAL = {"internal": True}   # a field for the report's code only, never written out
FLATTEN = {"flatten": True}     # a dataclass field whose own fields the JSON holds in its place
MiB = 1024 * 1024


def to_json(value: object) -> JsonValue:
    """Dataclasses, enums, mappings and sequences as JSON values; an object with its own
    `to_json` (a Note: its text) as that says."""
    own = getattr(value, "to_json", None)
    if callable(own):
        return own()
    if is_dataclass(value) and not isinstance(value, type):
        out: JsonObject = {}
        for f in fields(value):
            v = getattr(value, f.name)
            if f.metadata.get("internal") or (v is None and (f.metadata.get("omit_if_none")
                                                             or f.metadata.get("flatten"))):
                continue
            if f.metadata.get("flatten"):
                out.update(to_json(v))  # type: ignore[arg-type]
            else:
                out[f.name] = to_json(v)
        return out
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value  # type: ignore[return-value]


# ---- notes --------------------------------------------------------------------------------------

class NoteKind(StrEnum):
    CONDITION = "condition"    # what the figures were measured at, or how to read them
    SUBJECT = "subject"        # which bench subject a figure speaks for
    FLOOR = "floor"            # a ratio's matrix-multiply FLOP floor
    MISSING = "missing"        # a figure not measured, and what it needs
    UNMEASURED = "unmeasured"  # a figure not measured, nothing more specific known
    SOURCE = "source"          # where a figure filled from another file came from
    ADVICE = "advice"          # a recommendation in words


@dataclass(frozen=True)
class Note:
    """One line of the report's notes. Code reads `kind` and `about`, never the text."""
    kind: NoteKind
    text: str
    about: tuple[str, ...] = ()   # the summary keys (or parts of the verdict) it speaks for
    reason: str | None = None     # MISSING / UNMEASURED: why, as the terminal says it

    @classmethod
    def on(cls, kind: NoteKind, key: str, detail: str) -> Note:
        """A note about one key, written `key: detail`."""
        missing = kind in (NoteKind.MISSING, NoteKind.UNMEASURED)
        return cls(kind, f"{key}: {detail}", (key,), detail if missing else None)

    def to_json(self) -> str:
        return self.text

    def says_missing(self, key: str) -> bool:
        return key in self.about and self.kind in (NoteKind.MISSING, NoteKind.UNMEASURED)


# ---- measurements -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measurement:
    """One number with where it came from; every figure of the report cites these by id."""
    value: float
    unit: str
    machine: str
    file: str
    what: str


@dataclass(frozen=True)
class LatencyMeasurement(Measurement):
    all_tasks_mode: str | None   # "program" (one all-tasks program) or "sequential"


@dataclass(frozen=True)
class RatioMeasurement(Measurement):
    interval: Interval | None    # the paired ratio's 95% interval


class Measurements:
    """id -> Measurement; the only place numbers come from."""

    def __init__(self) -> None:
        self.items: dict[str, Measurement] = {}

    def add(self, mid: str, measurement: Measurement | None) -> None:
        if measurement is not None and measurement.value is not None:
            self.items[mid] = measurement

    def get(self, mid: str) -> float | None:
        found = self.items.get(mid)
        return None if found is None else found.value

    def starting(self, prefix: str) -> list[str]:
        """The ids that start with `prefix`, in the order they were added."""
        return [i for i in self.items if i.startswith(prefix)]


@dataclass(frozen=True)
class PairedRatio:
    """A time ratio from paired timing, as the verdict quotes it."""
    ratio: float
    interval: Interval
    reads: Reading        # what the interval lets the report say (bench/pairs.py's wording)
    pairs: int
    what: str
    source: str           # the pair's measurement id


# ---- a bench file -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    label: str                # as every figure of this machine is labelled
    facts: JsonObject         # the file's machine record, as report.json repeats it


@dataclass(frozen=True)
class BundleSizes:
    total_bytes: float | None
    trunk_bytes: float | None                    # one trunk shared by every task
    trunk_bytes_per_model: Mapping[str, float]   # separate models: each one's own trunk
    adapter_bytes: Mapping[str, float]
    per_model_bytes: Mapping[str, float]


@dataclass(frozen=True)
class TaskAdapter:
    kind: str                 # "head" or "pal"
    layers: tuple[int, ...]   # the trunk layers its PAL sits in
    placement: str            # those layers named (top-1, all, 3,4,5, ...); "none" for a head


@dataclass(frozen=True)
class Subject:
    """A set of task models one runtime runs: a multi-task bundle (role "pal"), the separate
    models ("separate"), a peer ("peer") or the app's own C++ path ("native")."""
    name: str
    role: str
    runtime: str
    precision: str
    label: str
    tasks: tuple[str, ...]
    placement: str                    # PALs in the trunk: none, all, top, top-N or indices
    pal_heads: int | None
    adapters: Mapping[str, TaskAdapter]
    all_tasks_program: bool
    sizes: BundleSizes
    memory: Mapping[str, float | None]   # RSS by moment (memory_rss_bytes)
    load_ms: float | None
    first_result_ms: float | None
    swap_ms: float | None
    fp32_model_dirs: Mapping[str, str]
    architectures: tuple[JsonObject, ...]   # `palkit verify-arch` records (export's format)


@dataclass(frozen=True)
class LatencyRow:
    id: str
    subject: str | None
    runtime: str
    config: str               # "task:<name>" or "all_tasks"
    threads: int
    seq_len: int
    p50_ms: float | None
    p90_ms: float | None
    runs: int
    error: str | None
    all_tasks_mode: str | None
    matmul_flops: float | None


@dataclass(frozen=True)
class TimedPair:
    """A ratio the bench timed in pairs (bench/pairs.py); ratio None when it could not run."""
    id: str
    kind: str                 # aa | identical_compute | one_task | all_tasks | all_vs_one | peer
    num: Side
    den: Side
    what: str
    threads: int | None
    seq_len: int | None
    ratio: float | None
    interval: Interval | None
    pairs: int | None


@dataclass(frozen=True)
class TaskPredictions:
    # class indices or scores; a set or tagging task's label names or tags per text
    pred: Sequence[float] | Sequence[Sequence[str]]
    gold: Sequence[float] | Sequence[Sequence[str]]


@dataclass(frozen=True)
class SplitScores:
    metrics: Mapping[str, float]          # numeric entries in file order, fractions (avg, ...)
    examples: Mapping[str, TaskPredictions]


@dataclass(frozen=True)
class AccuracyEntry:
    """The scores of a bench subject, or of an fp32 run in PyTorch (the reference)."""
    splits: Mapping[str, SplitScores]
    fp32_reference: bool
    run: str | None = None
    kind: str | None = None           # the fp32 run's training: "joint" or "separate"
    optimizer_steps: int | None = None


@dataclass(frozen=True)
class Ceiling:
    fp32_gflops_best: float | None
    int8_gops_best: float | None


@dataclass(frozen=True)
class TimingPlan:
    """How long the bench's paired timing ran: it adds worker processes until every verdict
    ratio's interval is within +- target_halfwidth (of the log ratio), or a cap stops it."""
    processes: int
    pairs: int
    block: int
    min_processes: int
    max_processes: int
    max_seconds: float
    target_halfwidth: float
    stopped: str              # "resolved" | "time cap" | "max processes"
    seconds: float


@dataclass(frozen=True)
class BenchFile:
    """One host bench file as read; `prefix` starts its measurement ids ("" for the first)."""
    path: str
    prefix: str
    machine: Machine
    subjects: Mapping[str, Subject]
    results: tuple[LatencyRow, ...]
    pairs: tuple[TimedPair, ...]
    accuracy: Mapping[str, AccuracyEntry]
    ceiling: Mapping[str, Ceiling]
    block: int                # calls per timed block of the latency rounds
    rounds: int               # latency processes per condition
    notes: tuple[str, ...]
    timing_plan: TimingPlan | None = None


@dataclass(frozen=True)
class DeviceFile:
    """A phone's file (the Android app's): one bundle, its rows and figures."""
    path: str
    machine: Machine
    results: tuple[LatencyRow, ...]
    figures: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
