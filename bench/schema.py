"""The one benchmark JSON schema ("palkit-bench", version 1) for host and phone results.

The Android app writes it (android_demo/core/.../bench/BenchReport.java) and `palkit bench`
writes it; `palkit report` reads both. Required keys, shared by both writers:

    {
      "schema": "palkit-bench", "version": 1,
      "machine": {"kind": "android" | "host", "model": "<phone model or CPU model>", ...},
      "bundle": {"<size key>": bytes, ...},
      "results": [{"runtime", "config": "task:<name>" | "all_tasks", "threads", "seq_len",
                   "p50_ms", "p90_ms", "runs"}, ...],
      "load_ms": {"<runtime>": ms}, "swap_ms": {"<runtime>": ms},
      "memory_rss_bytes": {"<when>": bytes}
    }

A phone file describes one bundle, so its top-level bundle / load_ms / swap_ms /
memory_rss_bytes belong to that bundle. A host file may describe several subjects (the PAL
bundle, the three separate models, the peers): then every result row names its `subject`, and
the optional `subjects` map holds each subject's own sizes, load, swap and memory figures in the
same shapes as the top-level keys. Host files may also carry `ceiling` (matmul throughput),
`flops`, `accuracy`, `notes`, the verdict's paired ratios (`pairs`) and the plan that timed them
(`timing_plan`, bench/plan.py; absent where no ratio was timed):

    {"processes": int, "pairs": int, "block": int, "min_processes": int, "max_processes": int,
     "max_seconds": float, "target_halfwidth": float,
     "stopped": "resolved" | "time cap" | "max processes", "seconds": float}

Readers ignore keys they do not know.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from palkit.core.errors import PalkitError

SCHEMA = "palkit-bench"
VERSION = 1
MACHINE_KINDS = ("android", "host")
PEERS = ("torch", "ort-int8", "et-int8")  # built from a --mode separate run (bench/peers.py)
ALL_TASKS = "__all__"  # a subject's all-tasks program, named among its tasks


def latency_id(subject: str, config: str, threads: int, seq_len: int) -> str:
    """A latency row's id in a bench file: `latency:SUBJECT:CONFIG:tTHREADS:sSEQ`, CONFIG being
    `task:NAME` or `all_tasks`; a measurement adds `:p50_ms` / `:p90_ms`, a file its prefix."""
    return f"latency:{subject}:{config}:t{threads}:s{seq_len}"


def measurement_id(prefix: str, kind: str, subject: str, *parts: str) -> str:
    """A report measurement's id: `PREFIX KIND:SUBJECT[:PART...]`, KIND being size, memory,
    swap_ms, accuracy or ceiling (e.g. `size:pals/executorch:total_bytes`); PREFIX is "" for
    the first host file, `hostN:` for the others."""
    return ":".join([f"{prefix}{kind}", subject, *parts])


def p50_id(prefix: str, subject: str, config: str, threads: int, seq_len: int) -> str:
    """The report measurement id of a latency row's p50."""
    return f"{prefix}{latency_id(subject, config, threads, seq_len)}:p50_ms"


def swap_and_memory(runtime: str, swaps: dict[str, float], after_swap: dict[str, float],
                    base: int, one: int, every: int) -> dict[str, Any]:
    """A subject's swap_ms (the upper median over tasks) and memory_rss_bytes, the model's own
    above `base` (the RSS before it loads). Current RSS, not the peak: on Linux a forked worker's
    ru_maxrss starts at the parent's peak, so it would measure the bench, not the model."""
    median = sorted(swaps.values())[len(swaps) // 2] if swaps else None
    return {"swap_ms": {runtime: median, "per_task": swaps, "first_run_after_swap_ms": after_swap},
            "memory_rss_bytes": {"after_import": base, "one_task": one, "all_tasks": every,
                                 "model_one_task": one - base, "model_all_tasks": every - base}}


RESULT_KEYS = ("runtime", "config", "threads", "seq_len", "p50_ms", "p90_ms", "runs")
PLAN_COUNTS = ("processes", "pairs", "block", "min_processes", "max_processes")
PLAN_FIGURES = ("max_seconds", "target_halfwidth", "seconds")
PLAN_STOPS = ("resolved", "time cap", "max processes")  # why the paired timing stopped
MAP_KEYS = ("bundle", "load_ms", "swap_ms", "memory_rss_bytes")


class BenchFileError(PalkitError, ValueError):
    """A benchmark JSON file is missing, not JSON, or does not follow the palkit-bench schema."""


class BenchError(PalkitError, ValueError):
    """A bundle or run given to `palkit bench` cannot be benchmarked."""


def percentile(samples: list[float], percent: float) -> float:
    """Linear interpolation between ranks (numpy's default), as the app's Percentiles does."""
    if not samples:
        raise ValueError("no samples")
    s = sorted(samples)
    rank = percent / 100 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (rank - lo) * (s[hi] - s[lo])


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_map(where: str, value: Any, nullable: bool = False) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    for k, v in value.items():
        if isinstance(v, dict):  # nested detail (e.g. per-task swap) is allowed
            _check_map(f"{where}.{k}", v, nullable)
        elif not (_is_number(v) or (nullable and v is None)):
            raise ValueError(f"{where}.{k} must be a number, got {v!r}")


def _check_timing_plan(plan: Any) -> None:
    if plan is None:
        return
    if not isinstance(plan, dict) or set(plan) != {*PLAN_COUNTS, *PLAN_FIGURES, "stopped"}:
        raise ValueError("timing_plan must be an object with "
                         f"{', '.join([*PLAN_COUNTS, *PLAN_FIGURES, 'stopped'])}")
    for k in PLAN_COUNTS:
        if not (isinstance(plan[k], int) and not isinstance(plan[k], bool) and plan[k] >= 0):
            raise ValueError(f"timing_plan.{k} must be a non-negative integer")
    for k in PLAN_FIGURES:
        if not _is_number(plan[k]):
            raise ValueError(f"timing_plan.{k} must be a number")
    if plan["stopped"] not in PLAN_STOPS:
        raise ValueError(f"timing_plan.stopped must be one of {', '.join(PLAN_STOPS)}")


def validate(data: Any) -> None:
    """Raise ValueError naming the first thing that breaks the schema."""
    if not isinstance(data, dict):
        raise ValueError("the top level must be a JSON object")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    if data.get("version") != VERSION:
        raise ValueError(f"version is {data.get('version')!r}, this palkit reads {VERSION}")
    machine = data.get("machine")
    if not isinstance(machine, dict) or machine.get("kind") not in MACHINE_KINDS:
        raise ValueError(f"machine.kind must be one of {', '.join(MACHINE_KINDS)}")
    if not isinstance(machine.get("model"), str) or not machine["model"]:
        raise ValueError("machine.model (phone model or CPU model) is missing")
    results = data.get("results")
    if not isinstance(results, list):
        raise ValueError("results must be a list")
    for i, row in enumerate(results):
        if not isinstance(row, dict):
            raise ValueError(f"results[{i}] must be an object")
        missing = [k for k in RESULT_KEYS if k not in row]
        if missing:
            raise ValueError(f"results[{i}] lacks {', '.join(missing)}")
        cfg = row["config"]
        if not (isinstance(cfg, str) and (cfg == "all_tasks" or
                                          (cfg.startswith("task:") and len(cfg) > 5))):
            raise ValueError(f"results[{i}].config must be 'task:<name>' or 'all_tasks', got {cfg!r}")
        for k in ("threads", "seq_len", "runs"):
            if not (isinstance(row[k], int) and not isinstance(row[k], bool) and row[k] >= 0):
                raise ValueError(f"results[{i}].{k} must be a non-negative integer")
        for k in ("p50_ms", "p90_ms"):
            # null only with an error saying why (a configuration the runtime refused)
            if not (_is_number(row[k]) or (row[k] is None and row.get("error"))):
                raise ValueError(f"results[{i}].{k} must be a number")
    for key in MAP_KEYS:
        if key in data:
            _check_map(key, data[key])
        elif machine["kind"] == "android":
            raise ValueError(f"{key} is missing")
    for i, pair in enumerate(data.get("pairs") or []):
        if not isinstance(pair, dict) or not all(k in pair for k in ("id", "kind", "num", "den")):
            raise ValueError(f"pairs[{i}] must be an object with id, kind, num and den")
        if "error" not in pair and not (_is_number(pair.get("ratio"))
                                        and isinstance(pair.get("interval"), list)):
            raise ValueError(f"pairs[{i}] has neither a ratio with its interval nor an error")
    _check_timing_plan(data.get("timing_plan"))
    subjects = data.get("subjects", {})
    if not isinstance(subjects, dict):
        raise ValueError("subjects must be an object")
    for name, sub in subjects.items():
        if not isinstance(sub, dict):
            raise ValueError(f"subjects.{name} must be an object")
        for key in MAP_KEYS:
            if key in sub:
                _check_map(f"subjects.{name}.{key}", sub[key], nullable=True)
    for i, row in enumerate(results if subjects else []):
        if row.get("subject") not in subjects:
            raise ValueError(f"results[{i}].subject {row.get('subject')!r} is not in subjects")


def load_bench_file(path: str | Path) -> dict[str, Any]:
    """Read and validate one benchmark file; every failure is one line naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BenchFileError(f"{path}: benchmark file not found") from None
    except OSError as e:
        raise BenchFileError(f"{path}: cannot read ({e.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BenchFileError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    try:
        validate(data)
    except ValueError as e:
        raise BenchFileError(f"{path}: not a palkit-bench v{VERSION} file: {e}") from None
    return data
