"""Which subjects and measurements a figure compares, by what the bench file records of each
subject (role, runtime, precision, PAL layers and heads), and the condition figures are read at.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path

from palkit.bench.schema import measurement_id, p50_id
from palkit.report.model import BenchFile, Measurements, Subject

REF_SEQ, REF_THREADS = 128, 1


def reference_condition(bench: BenchFile) -> tuple[int, int]:
    """(threads, seq_len) figures compare at: 1 thread and 128 tokens where measured, else the
    fewest threads and the longest input."""
    rows = bench.results
    threads = REF_THREADS if any(r.threads == REF_THREADS for r in rows) else \
        min((r.threads for r in rows), default=REF_THREADS)
    seq = REF_SEQ if any(r.seq_len == REF_SEQ for r in rows) else \
        max((r.seq_len for r in rows), default=REF_SEQ)
    return threads, seq


def task_p50(m: Measurements, prefix: str, subject: str, tasks: tuple[str, ...] | list[str],
             threads: int, seq: int) -> tuple[float | None, list[str]]:
    """Mean one-task p50 over the subject's tasks, and the ids it came from."""
    ids = [p50_id(prefix, subject, f"task:{t}", threads, seq) for t in tasks]
    values = [m.get(i) for i in ids]
    return (statistics.fmean(values) if values and None not in values else None), ids  # type: ignore


def total_bytes(m: Measurements, prefix: str, subject: str) -> float | None:
    """A subject's model files for all its tasks, in bytes."""
    return m.get(measurement_id(prefix, "size", subject, "total_bytes"))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def pal_groups(subjects: Mapping[str, Subject]) -> tuple[list[str], list[str]]:
    """(all-layer PAL subjects, top-half PAL subjects), int8 preferred: a bundle with PALs in
    fewer layers (top-1, or 3,4,5 of a 12-layer trunk) is neither."""
    pals = [n for n, s in subjects.items() if s.role == "pal"]
    pals = [n for n in pals if subjects[n].precision == "int8"] or pals
    all_layer = [n for n in pals if subjects[n].placement == "all"]
    # The paper's PAL has the trunk's head count; a fewer-heads variant (--pal-heads) is a
    # frontier point, not the paper's all-layer PALs.
    most = max((subjects[n].pal_heads or 0 for n in all_layer), default=0)
    all_layer = [n for n in all_layer if (subjects[n].pal_heads or 0) == most]
    return all_layer, [n for n in pals if subjects[n].placement == "top"]


def plain_subjects(subjects: Mapping[str, Subject], pal: str) -> list[str]:
    """Our own no-PAL separate models on the PAL subject's runtime and precision."""
    s = subjects[pal]
    return [n for n, o in subjects.items() if o.role == "separate"
            and o.runtime == s.runtime and o.precision == s.precision]


def size_reference(subjects: Mapping[str, Subject], pal: str) -> str | None:
    """Three separate int8 models on the PAL subject's runtime: our bundles, else the peer."""
    ref = plain_subjects(subjects, pal) or [n for n, o in subjects.items() if o.role == "peer"
                                            and o.runtime == subjects[pal].runtime
                                            and o.precision == "int8"]
    return ref[0] if ref else None


def source_run(bench: BenchFile, subject: Subject) -> str | None:
    """The accuracy entry of the fp32 --run the subject's models were trained in: the deepest
    run folder holding all of its model folders; None when no --run does."""
    dirs = [Path(d).resolve() for d in subject.fp32_model_dirs.values()]
    found = [(len(Path(e.run).resolve().parts), name) for name, e in bench.accuracy.items()
             if e.fp32_reference and e.run and dirs
             and all(d.is_relative_to(Path(e.run).resolve()) for d in dirs)]
    return max(found)[1] if found else None


def accuracy_split(bench: BenchFile) -> str:
    """Accuracy is reported on test where measured, else dev."""
    return "test" if any("test" in e.splits for e in bench.accuracy.values()) else "dev"
