"""The deployment frontier: accuracy against cost for every configuration of a study.

Joins a host bench file (bundles named after the study's configurations, e.g.
`bundles/pals-top-1`; the study's separate models are the separate models or, failing them, the
peer of each runtime) with a study's accuracy table (`palkit study-results`): one point per
configuration with both. recommend.py decides from the points what to ship.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from palkit.bench.schema import p50_id
from palkit.report.ingest import Study
from palkit.report.model import FLATTEN, INTERNAL, BenchFile, Measurements, Subject
from palkit.report.recommend import ShipChoice, choose_shipping
from palkit.report.selection import REF_SEQ, REF_THREADS, task_p50
from palkit.runtime.manifest import RUNTIMES

SEPARATE = "separate"   # the study's configuration of one fully fine-tuned model per task


@dataclass(frozen=True)
class ExecutorchCost:
    """Bytes and all-tasks latency, from a configuration's ExecuTorch bundle."""
    bundle_bytes: float
    task_specific_bytes: float
    all_tasks_ms: float | None
    all_tasks_ratio: float | None


@dataclass
class FrontierPoint:
    name: str
    accuracy: float
    accuracy_sd: float | None
    split: str
    one_task_ms: dict[str, float | None]
    sources: list[str]
    executorch: ExecutorchCost | None = field(default=None, metadata=FLATTEN)
    role: str = field(default="", metadata=INTERNAL)         # its bundle's, as recorded
    placement: str = field(default="none", metadata=INTERNAL)

    @property
    def bundle_bytes(self) -> float | None:
        return self.executorch.bundle_bytes if self.executorch else None

    @property
    def task_specific_bytes(self) -> float | None:
        return self.executorch.task_specific_bytes if self.executorch else None

    @property
    def all_tasks_ms(self) -> float | None:
        return self.executorch.all_tasks_ms if self.executorch else None

    @property
    def all_tasks_ratio(self) -> float | None:
        return self.executorch.all_tasks_ratio if self.executorch else None


@dataclass
class Frontier:
    accuracy_file: str
    points: list[FrontierPoint]
    recommendation: ShipChoice
    accuracy_sd_points: float | None   # seed-to-seed sd of the study's dev averages


def _subject(bench: BenchFile, name: str, runtime: str) -> Subject | None:
    """The bundle benched for a study configuration on a runtime."""
    named = [f"{name}/{runtime}", f"{name}/{runtime}/int8"]
    found = [bench.subjects[n] for n in named if n in bench.subjects]
    if name == SEPARATE:   # our separate models, else the plain int8 classifiers of the same run
        found += [s for role in ("separate", "peer") for s in bench.subjects.values()
                  if s.role == role and s.runtime == runtime and s.precision == "int8"]
    return found[0] if found else None


def frontier_points(bench: BenchFile, m: Measurements,
                    study: Study) -> tuple[list[FrontierPoint], str]:
    """One point per configuration that has both an accuracy row and a benched bundle."""
    prefix = bench.prefix
    split = "test" if all(r.test_avg for r in study.rows) else "dev"  # the split every row has
    points = []
    for row in study.rows:
        found = {rt: _subject(bench, row.name, rt) for rt in RUNTIMES}
        subjects = [s for s in found.values() if s is not None]
        if not subjects:
            continue
        avg = row.test_avg if split == "test" else row.dev_avg
        assert avg is not None
        point = FrontierPoint(row.name, avg.mean, avg.sd, split, {}, [],
                              role=subjects[0].role, placement=subjects[0].placement)
        for rt, s in found.items():
            if s is None:
                continue
            one, ids = task_p50(m, prefix, s.name, s.tasks, REF_THREADS, REF_SEQ)
            point.one_task_ms[rt] = one
            point.sources += ids
            if rt != "executorch":  # bytes and all tasks: the ExecuTorch bundle's
                continue
            task_bytes = (s.sizes.total_bytes if s.role in ("separate", "peer")
                          else sum(s.sizes.adapter_bytes.values()))
            mid = p50_id(prefix, s.name, "all_tasks", REF_THREADS, REF_SEQ)
            all_tasks, sources = m.get(mid), [mid]
            if all_tasks is None and one is not None:  # not measured: the tasks one by one
                all_tasks, sources = one * len(s.tasks), ids
            point.sources += sources
            point.executorch = ExecutorchCost(s.sizes.total_bytes, task_bytes,  # type: ignore
                                              all_tasks, all_tasks / one if all_tasks and one
                                              else None)
        points.append(point)
    return points, split


def frontier(bench: BenchFile, m: Measurements, study: Study) -> Frontier:
    points, split = frontier_points(bench, m, study)
    sds = [r.dev_avg.sd for r in study.rows if r.dev_avg and r.dev_avg.sd is not None]
    return Frontier(study.path, points,
                    choose_shipping(points, split, f"{REF_SEQ} tokens, {REF_THREADS} thread"),
                    statistics.fmean(sds) if sds else None)
