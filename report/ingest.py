"""Reading the report's inputs into typed data (model.py): host bench files and phone files with
their measurements, a study's accuracy table, a leave-one-out study of tasks added later and a PAL
model's int8 scores. This is the only module of the report that reads their JSON.

Every number the report shows is a measurement with an id (report.json "measurements"), so each
figure can be traced back to one worker run in one bench file. Host figures are labelled with the
host CPU, phone figures with the phone model.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from palkit.bench.pairs import Side
from palkit.bench.schema import latency_id, load_bench_file, measurement_id
from palkit.core.errors import ConfigError, PalkitError
from palkit.core.host import int8_features
from palkit.report.model import (AccuracyEntry, BenchFile, BundleSizes, Ceiling,
                                 DeviceFile, JsonObject, LatencyMeasurement, LatencyRow, Machine,
                                 Measurement, Measurements, RatioMeasurement, SplitScores, Subject,
                                 TaskAdapter, TaskPredictions, TimedPair, TimingPlan)
from palkit.trainer.checkpoint import read_json
from palkit.trainer.placement import check_placement, placement_name

_Raw = Mapping[str, Any]   # a JSON object as read, before it is typed here


class ReportError(PalkitError, ValueError):
    """The report cannot be written from these inputs."""


def machine_label(machine: _Raw) -> str:
    """A bench file's machine record in words: the phone model, or the host CPU with its cores
    and int8 instructions (they decide the int8 figures; a file may lack the flags)."""
    if machine["kind"] == "android":
        maker = machine.get("manufacturer")
        name = f"{maker} {machine['model']}" if maker and maker not in machine["model"] else machine["model"]
        return f"phone: {name} (Android {machine.get('android_version', '?')}, {machine.get('abi', '?')})"
    facts = [f"{machine['cores_logical']} cores" if machine.get("cores_logical") else "",
             int8_features(machine["cpu_flags"]) if machine.get("cpu_flags") else ""]
    facts = [f for f in facts if f]
    return f"host CPU: {machine['model']}" + (f" ({'; '.join(facts)})" if facts else "")


# ---- bench files --------------------------------------------------------------------------------

def read_inputs(bench_files: list[Path], device_files: list[Path],
                m: Measurements) -> tuple[list[BenchFile], list[DeviceFile]]:
    """(hosts, devices), their measurements added to `m`; the first host's ids carry no prefix,
    later hosts `hostN:`. A phone's file is read as one wherever it is given."""
    hosts: list[BenchFile] = []
    devices: list[DeviceFile] = []
    for f in bench_files:
        data = load_bench_file(f)
        if data["machine"]["kind"] == "android":
            devices.append(_device(data, str(f), m))
            continue
        bench = parse_bench(data, str(f), "" if not hosts else f"host{len(hosts) + 1}:")
        measure_host(bench, m)
        hosts.append(bench)
    for f in device_files:
        data = load_bench_file(f)
        if data["machine"]["kind"] != "android":
            raise ReportError(f"{f}: --device-results expects the phone app's file "
                              f"(machine.kind android), this one is {data['machine']['kind']}; "
                              "pass it with --bench")
        devices.append(_device(data, str(f), m))
    return hosts, devices


def parse_bench(data: JsonObject, path: str, prefix: str = "") -> BenchFile:
    """A host bench file's JSON (schema-checked by bench/schema.py) as typed data."""
    raw: _Raw = data
    settings = raw.get("settings") or {}
    return BenchFile(
        path=path, prefix=prefix, machine=_machine(raw["machine"]),
        subjects={n: _subject(n, s) for n, s in (raw.get("subjects") or {}).items()},
        results=tuple(_row(r, r.get("id") or latency_id(r.get("subject", "bundle"), r["config"],
                                                        r["threads"], r["seq_len"]))
                      for r in raw["results"]),
        pairs=tuple(_pair(p) for p in raw.get("pairs") or []),
        accuracy={n: _accuracy_entry(n, e) for n, e in (raw.get("accuracy") or {}).items()
                  if isinstance(e, dict)},
        ceiling={n: Ceiling(c.get("fp32_gflops_best"), c.get("int8_gops_best"))
                 for n, c in (raw.get("ceiling") or {}).items()},
        block=settings.get("block", 1), rounds=settings.get("rounds", 1),
        notes=tuple(raw.get("notes") or ()),
        timing_plan=_timing_plan(raw.get("timing_plan")))


def _timing_plan(plan: _Raw | None) -> TimingPlan | None:
    """The bench's plan for its paired timing, where the file has one."""
    return TimingPlan(**{f.name: plan[f.name] for f in fields(TimingPlan)}) if plan else None


def _machine(machine: _Raw) -> Machine:
    return Machine(machine_label(machine), dict(machine))


def _placement(s: _Raw) -> str:
    """PALs in the trunk named from their layer indices (all, top, top-N, 3,4,5, ...; "none"
    without); a subject that recorded a name keeps it."""
    layers = s.get("pal_layers")
    if isinstance(layers, str) or layers is None:
        return layers or "none"
    return placement_name(layers, int(s["num_layers"])) if layers else "none"


def _task_adapter(adapter: _Raw, s: _Raw) -> TaskAdapter:
    layers = tuple(adapter.get("layers") or ())
    placement = placement_name(layers, int(s["num_layers"])) if layers else "none"
    return TaskAdapter(adapter.get("kind"), layers, placement)


def _subject(name: str, s: _Raw) -> Subject:
    sizes, runtime = s.get("bundle") or {}, s.get("runtime")
    trunk = sizes.get("trunk_bytes")
    return Subject(
        name=name, role=s.get("role", ""), runtime=runtime, precision=s.get("precision"),
        label=s.get("label", name), tasks=tuple(s.get("tasks") or ()), placement=_placement(s),
        pal_heads=s.get("pal_heads"),
        adapters={t: _task_adapter(a, s) for t, a in (s.get("task_adapters") or {}).items() if a},
        all_tasks_program=bool(s.get("all_tasks_program")),
        sizes=BundleSizes(total_bytes=sizes.get("total_bytes"),
                          trunk_bytes=trunk if isinstance(trunk, (int, float)) else None,
                          trunk_bytes_per_model=trunk if isinstance(trunk, dict) else {},
                          adapter_bytes=sizes.get("adapter_bytes") or {},
                          per_model_bytes=sizes.get("per_model_bytes") or {}),
        memory=s.get("memory_rss_bytes") or {},
        load_ms=(s.get("load_ms") or {}).get(runtime),
        first_result_ms=(s.get("first_result_ms") or {}).get(runtime),
        swap_ms=(s.get("swap_ms") or {}).get(runtime),
        fp32_model_dirs=s.get("fp32_model_dirs") or {},
        architectures=tuple((s.get("architectures") or {}).values()))


def _row(r: _Raw, rid: str) -> LatencyRow:
    return LatencyRow(id=rid, subject=r.get("subject"), runtime=r["runtime"], config=r["config"],
                      threads=r["threads"], seq_len=r["seq_len"], p50_ms=r.get("p50_ms"),
                      p90_ms=r.get("p90_ms"), runs=r["runs"], error=r.get("error"),
                      all_tasks_mode=r.get("all_tasks_mode"), matmul_flops=r.get("matmul_flops"))


def _pair(p: _Raw) -> TimedPair:
    interval = p.get("interval")
    return TimedPair(id=p["id"], kind=p["kind"], num=Side(**p["num"]), den=Side(**p["den"]),
                     what=p.get("what", ""), threads=p.get("threads"), seq_len=p.get("seq_len"),
                     ratio=p.get("ratio"), interval=tuple(interval) if interval else None,
                     pairs=p.get("pairs"))


def _accuracy_entry(name: str, entry: _Raw) -> AccuracyEntry:
    splits = {}
    for split, scores in entry.items():
        if not isinstance(scores, dict):
            continue
        metrics = {k: v for k, v in scores.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        examples = {t: TaskPredictions(e["pred"], e["gold"])
                    for t, e in (scores.get("examples") or {}).items()}
        splits[split] = SplitScores(metrics, examples)
    # an fp32 run the bench scored in PyTorch records the run; a subject's entry does not
    return AccuracyEntry(splits, entry.get("run") is not None, entry.get("run"), entry.get("kind"),
                         entry.get("optimizer_steps"))


def measure_host(bench: BenchFile, m: Measurements) -> None:
    """Every figure of a host file as a measurement with its id."""
    prefix, label, file = bench.prefix, bench.machine.label, bench.path
    for subject in bench.subjects.values():
        _measure_subject(subject, prefix, label, file, m)
    for row in bench.results:
        for q, value in (("p50_ms", row.p50_ms), ("p90_ms", row.p90_ms)):
            if value is not None:
                m.add(f"{prefix}{row.id}:{q}", LatencyMeasurement(
                    value, "ms", label, file, f"{row.subject or ''} {row.runtime} {row.config} "
                    f"{row.threads} thread(s) {row.seq_len} tokens {q[:3]}", row.all_tasks_mode))
    for pair in bench.pairs:
        if pair.ratio is not None:
            m.add(f"{prefix}{pair.id}", RatioMeasurement(
                pair.ratio, "x", label, file, f"{pair.what}, paired timing, {pair.threads} "
                f"thread(s) {pair.seq_len} tokens", pair.interval))
    for n, c in bench.ceiling.items():
        m.add(measurement_id(prefix, "ceiling", "fp32", f"t{n}"), _measured(
            c.fp32_gflops_best, "GFLOP/s", label, file, f"best fp32 GEMM, {n} thread(s)"))
        m.add(measurement_id(prefix, "ceiling", "int8", f"t{n}"), _measured(
            c.int8_gops_best, "GOP/s", label, file, f"best int8 GEMM, {n} thread(s)"))
    for name, entry in bench.accuracy.items():
        for split, scores in entry.splits.items():
            for k, v in scores.metrics.items():
                m.add(measurement_id(prefix, "accuracy", name, split, k), _measured(
                    v * 100 if k != "max_len" else v, "points" if k != "max_len" else "tokens",
                    label, file, f"{name} {split} {k}"))


def _measured(value: float | None, unit: str, machine: str, file: str,
              what: str) -> Measurement | None:
    return None if value is None else Measurement(value, unit, machine, file, what)


def _measure_subject(s: Subject, prefix: str, label: str, file: str, m: Measurements) -> None:
    """Sizes, load, swap and memory of one host subject."""
    def size(*parts: str) -> str:
        return measurement_id(prefix, "size", s.name, *parts)

    m.add(size("total_bytes"), _measured(s.sizes.total_bytes, "bytes", label, file,
                                         f"{s.label}: model files for all its tasks"))
    m.add(size("trunk_bytes"), _measured(s.sizes.trunk_bytes, "bytes", label, file,
                                         "shared trunk"))
    for task, b in s.sizes.adapter_bytes.items():
        m.add(size("adapter", task), _measured(b, "bytes", label, file, f"{task} adapter blob"))
    for task, b in s.sizes.per_model_bytes.items():
        m.add(size("model", task), _measured(b, "bytes", label, file, f"{task} model"))
    for key, value, what in (("load_ms", s.load_ms, "cold load (trunk + first task, to runnable)"),
                             ("first_result_ms", s.first_result_ms, "cold load + first inference")):
        m.add(measurement_id(prefix, key, s.name), _measured(value, "ms", label, file, what))
    m.add(measurement_id(prefix, "swap_ms", s.name), _measured(
        s.swap_ms, "ms", label, file, "swap to a not-yet-loaded task, to runnable (median over "
        "worker processes, upper median over tasks)"))
    for key, v in s.memory.items():
        m.add(measurement_id(prefix, "memory", s.name, key), _measured(v, "bytes", label, file,
                                                                       f"RSS {key}"))


def _device(data: _Raw, file: str, m: Measurements) -> DeviceFile:
    """A phone's file (the Android app's); its ids start `device:<model>`."""
    machine = _machine(data["machine"])
    dev = "device:" + data["machine"]["model"].replace(" ", "_")
    figures = {}
    # file key: (measurement kind, unit, what), each keyed by a size key, runtime or moment
    for key, (kind, unit, what) in {"bundle": ("size", "bytes", "bundle {}"),
                                    "load_ms": ("load_ms", "ms", "cold load on {}"),
                                    "swap_ms": ("swap_ms", "ms", "adapter swap on {}"),
                                    "memory_rss_bytes": ("memory", "bytes", "RSS {}")}.items():
        figures[key] = dict(data.get(key) or {})
        for k, v in figures[key].items():
            if isinstance(v, (int, float)):
                m.add(measurement_id(f"{dev}:", kind, k),
                      Measurement(v, unit, machine.label, file, what.format(k)))
    rows = []
    for r in data["results"]:
        row = _row(r, f"{dev}:" + latency_id(r["runtime"], r["config"], r["threads"],
                                             r["seq_len"]))
        rows.append(row)
        for q, value in (("p50_ms", row.p50_ms), ("p90_ms", row.p90_ms)):
            m.add(f"{row.id}:{q}", _measured(value, "ms", machine.label, file,
                                             f"{row.runtime} {row.config} {row.threads} "
                                             f"thread(s) {row.seq_len} tokens"))
    return DeviceFile(file, machine, tuple(rows), figures)


# ---- the studies' tables ------------------------------------------------------------------------

@dataclass(frozen=True)
class SeedStats:
    """A score averaged over a study's seeds, in points."""
    mean: float
    n: int
    sd: float | None


@dataclass(frozen=True)
class StudyRow:
    name: str                       # the study's configuration; bundles are named after it
    dev_avg: SeedStats | None
    test_avg: SeedStats | None


@dataclass(frozen=True)
class Study:
    """A study's accuracy table (`palkit study-results`, e.g. results/converged.json)."""
    path: str
    machine: str
    rows: tuple[StudyRow, ...]

    def row(self, name: str) -> StudyRow | None:
        return next((r for r in self.rows if r.name == name), None)


def read_study(path: Path) -> Study:
    data = read_json(path)

    def stats(value: _Raw | None) -> SeedStats | None:
        return SeedStats(value["mean"], value["n"], value["sd"]) if value else None
    return Study(str(path), data.get("machine", "?"),
                 tuple(StudyRow(r["name"], stats(r.get("dev_avg")), stats(r.get("test_avg")))
                       for r in data["rows"]))


@dataclass(frozen=True)
class AdapterSpec:
    """How a task is added to a shipped trunk, from the leave-one-out study's adapter column
    ("head", or "pal-" and a `--pal-layers` placement)."""
    name: str
    kind: str                       # "head" or "pal"
    placement: str | None = None    # the PALs' layers, as `--pal-layers` spells them

    @classmethod
    def parse(cls, name: str) -> AdapterSpec:
        if name == "head":
            return cls(name, "head")
        kind, _, layers = name.partition("-")
        try:
            check_placement(layers)
        except ConfigError:
            kind = ""
        if kind != "pal":
            raise ReportError(f"later-tasks study: adapter {name!r} is neither 'head' nor "
                              "'pal-' and a placement (pal-top-1, pal-all, ...)")
        return cls(name, "pal", layers)


@dataclass(frozen=True)
class LaterTaskRow:
    """One task added later with one adapter: its change against training it jointly from the
    start (a left-out launch task) or against its own separate model (a new task)."""
    task: str
    adapter: AdapterSpec
    vs_joint: float | None
    vs_separate: float | None
    adapter_bytes: float
    share_of_trunk: float


def read_later_tasks(path: Path) -> list[LaterTaskRow]:
    if not Path(path).is_file():
        raise ReportError(f"{path}: no such file (--later-tasks: a leave-one-out study's JSON)")
    return [LaterTaskRow(r["task"], AdapterSpec.parse(r["adapter"]), r.get("vs_joint"),
                         r.get("vs_separate"), r["adapter_bytes"], r["adapter_share_of_trunk"])
            for r in read_json(path)["rows"]]


@dataclass(frozen=True)
class Int8Scores:
    """One PAL model's average score in fp32 (runtime "pytorch") and as each runtime's int8
    bundle runs it, in points, by (runtime, split)."""
    path: Path
    what: str
    machine: str
    scores: Mapping[tuple[str, str], float]


def read_int8_scores(path: Path) -> Int8Scores:
    data = read_json(path)
    scores: dict[tuple[str, str], float] = {}
    for i, row in enumerate(data.get("rows") or []):
        missing = [k for k in ("runtime", "split", "avg") if k not in row]
        if missing:
            raise ReportError(f"{path}: rows[{i}] lacks {', '.join(missing)}; each row needs "
                              "runtime (pytorch, executorch or onnxruntime), split and avg")
        scores[(row["runtime"], row["split"])] = 100 * row["avg"]
    if not scores:
        raise ReportError(f"{path}: no rows; expected the PAL model's scores per runtime and split")
    return Int8Scores(path, data.get("what", "the PAL model"), data.get("machine", "?"), scores)
