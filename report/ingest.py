"""Reading palkit-bench files (host and phone) into measurements with ids.

Every number the report shows is a *measurement* with an id (report.json "measurements"), so
each figure can be traced back to one worker run in one bench file. Host figures are labelled
with the host CPU, phone figures with the phone model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from palkit.bench.schema import latency_id, load_bench_file, measurement_id
from palkit.core.errors import PalkitError
from palkit.core.host import int8_features
from palkit.trainer.placement import placement_name

MiB = 1024 * 1024


class ReportError(PalkitError, ValueError):
    """The report cannot be written from these inputs."""


class BenchInput(NamedTuple):
    """One bench file as read: its id prefix (host) or device key (phone), content and path."""
    key: str
    data: dict[str, Any]
    file: str


def machine_label(machine: dict[str, Any]) -> str:
    if machine["kind"] == "android":
        maker = machine.get("manufacturer")
        name = f"{maker} {machine['model']}" if maker and maker not in machine["model"] else machine["model"]
        return f"phone: {name} (Android {machine.get('android_version', '?')}, {machine.get('abi', '?')})"
    # the int8 instructions decide the int8 figures (core/host.py); older files lack the flags
    facts = [f"{machine['cores_logical']} cores" if machine.get("cores_logical") else "",
             int8_features(machine["cpu_flags"]) if machine.get("cpu_flags") else ""]
    facts = [f for f in facts if f]
    return f"host CPU: {machine['model']}" + (f" ({'; '.join(facts)})" if facts else "")


class Measurements:
    """id -> {value, unit, machine, file, what}; the only place numbers come from."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def add(self, mid: str, value: Any, unit: str, machine: str, file: str, what: str,
            **extra: Any) -> None:
        if value is None:
            return
        self.items[mid] = {"value": value, "unit": unit, "machine": machine, "file": file,
                           "what": what, **extra}

    def get(self, mid: str) -> float | None:
        return self.items.get(mid, {}).get("value")


def host_subjects(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return data.get("subjects") or {}


def placement(subject: dict[str, Any]) -> str:
    """A subject's PAL placement named from its layer indices (all, top, top-N, 3,4,5, ...; "none"
    without PALs); an older file that recorded a name keeps it."""
    layers = subject.get("pal_layers")
    if isinstance(layers, str) or layers is None:
        return layers or "none"
    return placement_name(layers, int(subject["num_layers"])) if layers else "none"


def read_inputs(bench_files: list[Path], device_files: list[Path],
                m: Measurements) -> tuple[list[BenchInput], list[BenchInput]]:
    """(hosts, devices); the first host's ids carry no prefix, later hosts `hostN:`."""
    hosts: list[BenchInput] = []
    devices: list[BenchInput] = []
    for f in bench_files:
        data = load_bench_file(f)
        if data["machine"]["kind"] == "android":
            devices.append(BenchInput(ingest_device(data, str(f), m), data, str(f)))
            continue
        prefix = "" if not hosts else f"host{len(hosts) + 1}:"
        ingest_host(data, prefix, str(f), m)
        hosts.append(BenchInput(prefix, data, str(f)))
    for f in device_files:
        data = load_bench_file(f)
        if data["machine"]["kind"] != "android":
            raise ReportError(f"{f}: --device-results expects the phone app's file "
                              f"(machine.kind android), this one is {data['machine']['kind']}; "
                              "pass it with --bench")
        devices.append(BenchInput(ingest_device(data, str(f), m), data, str(f)))
    return hosts, devices


def ingest_host(data: dict[str, Any], prefix: str, file: str, m: Measurements) -> None:
    label = machine_label(data["machine"])
    for name, s in host_subjects(data).items():
        _ingest_subject(name, s, prefix, label, file, m)
    for row in data["results"]:
        rid = row.get("id") or latency_id(row.get("subject", "bundle"), row["config"],
                                          row["threads"], row["seq_len"])
        for q in ("p50_ms", "p90_ms"):
            m.add(f"{prefix}{rid}:{q}", row.get(q), "ms", label, file,
                  f"{row.get('subject', '')} {row['runtime']} {row['config']} {row['threads']} "
                  f"thread(s) {row['seq_len']} tokens {q[:3]}",
                  all_tasks_mode=row.get("all_tasks_mode"))
    for pair in data.get("pairs") or []:
        m.add(f"{prefix}{pair['id']}", pair.get("ratio"), "x", label, file,
              f"{pair['what']}, paired timing, {pair['threads']} thread(s) {pair['seq_len']} "
              "tokens", interval=pair.get("interval"))
    for n, c in (data.get("ceiling") or {}).items():
        m.add(measurement_id(prefix, "ceiling", "fp32", f"t{n}"), c.get("fp32_gflops_best"),
              "GFLOP/s", label, file, f"best fp32 GEMM, {n} thread(s)")
        m.add(measurement_id(prefix, "ceiling", "int8", f"t{n}"), c.get("int8_gops_best"),
              "GOP/s", label, file, f"best int8 GEMM, {n} thread(s)")
    for name, per_split in (data.get("accuracy") or {}).items():
        for split, metrics in per_split.items():
            if not isinstance(metrics, dict):
                continue
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    m.add(measurement_id(prefix, "accuracy", name, split, k),
                          v * 100 if k != "max_len" else v,
                          "points" if k != "max_len" else "tokens", label, file,
                          f"{name} {split} {k}")


def _ingest_subject(name: str, s: dict[str, Any], prefix: str, label: str, file: str,
                    m: Measurements) -> None:
    """Sizes, load, swap and memory of one host subject."""
    sizes = s.get("bundle", {})

    def size(*parts: str) -> str:
        return measurement_id(prefix, "size", name, *parts)

    m.add(size("total_bytes"), sizes.get("total_bytes"), "bytes", label, file,
          f"{s.get('label', name)}: model files for all its tasks")
    trunk = sizes.get("trunk_bytes")
    if isinstance(trunk, (int, float)):
        m.add(size("trunk_bytes"), trunk, "bytes", label, file, "shared trunk")
    for task, b in (sizes.get("adapter_bytes") or {}).items():
        m.add(size("adapter", task), b, "bytes", label, file, f"{task} adapter blob")
    for task, b in (sizes.get("per_model_bytes") or {}).items():
        m.add(size("model", task), b, "bytes", label, file, f"{task} model")
    rt = s.get("runtime")
    for key, what in (("load_ms", "cold load (trunk + first task, to runnable)"),
                      ("first_result_ms", "cold load + first inference")):
        m.add(measurement_id(prefix, key, name), (s.get(key) or {}).get(rt), "ms", label, file,
              what)
    m.add(measurement_id(prefix, "swap_ms", name), (s.get("swap_ms") or {}).get(rt), "ms", label,
          file, "swap to a not-yet-loaded task, to runnable (median over worker processes, upper "
          "median over tasks)")
    for key, v in (s.get("memory_rss_bytes") or {}).items():
        m.add(measurement_id(prefix, "memory", name, key), v, "bytes", label, file, f"RSS {key}")


def ingest_device(data: dict[str, Any], file: str, m: Measurements) -> str:
    """A phone's file (the Android app's); returns its id prefix `device:<model>`."""
    label = machine_label(data["machine"])
    dev = "device:" + data["machine"]["model"].replace(" ", "_")
    # file key: (measurement kind, unit, what), each keyed by a size key, runtime or moment
    for key, (kind, unit, what) in {"bundle": ("size", "bytes", "bundle {}"),
                                    "load_ms": ("load_ms", "ms", "cold load on {}"),
                                    "swap_ms": ("swap_ms", "ms", "adapter swap on {}"),
                                    "memory_rss_bytes": ("memory", "bytes", "RSS {}")}.items():
        for k, v in (data.get(key) or {}).items():
            if isinstance(v, (int, float)):
                m.add(measurement_id(f"{dev}:", kind, k), v, unit, label, file, what.format(k))
    for row in data["results"]:
        rid = f"{dev}:" + latency_id(row["runtime"], row["config"], row["threads"], row["seq_len"])
        for q in ("p50_ms", "p90_ms"):
            m.add(f"{rid}:{q}", row.get(q), "ms", label, file, f"{row['runtime']} {row['config']} "
                  f"{row['threads']} thread(s) {row['seq_len']} tokens")
    return dev
