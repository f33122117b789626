"""`palkit report`: turn palkit-bench files (host and phone) into report.md / report.json / PNGs.

The steps: ingest.py (typed inputs, measurements with ids), recommend.py (what to launch with,
how to add a task later, which configuration and PAL placement to ship), verdict.py (the launch
configuration against the separate models, with the run's calibration), paper_reference.py (the
paper's all-layer PALs against their targets), frontier.py (a study's configurations against
their cost), charts.py (the figures) and markdown.py (report.md).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from palkit.core.fileio import write_text
from palkit.report.charts import Chart, write_charts
from palkit.report.comparisons import CeilingShare, PairwiseRow, ceiling_fraction, pairwise
from palkit.report.frontier import Frontier, frontier
from palkit.report.ingest import (ReportError, read_inputs, read_int8_scores, read_later_tasks,
                                  read_study)
from palkit.report.markdown import render_markdown
from palkit.report.model import (INTERNAL, BenchFile, DeviceFile, JsonObject, Measurements,
                                 to_json)
from palkit.report.paper_reference import (ReferenceSummary, TargetCheck, check_targets,
                                           no_host_summary, paper_reference, reference_pal)
from palkit.report.recommend import PLACEMENT_KEYS, AddTaskAdvice, advise_add_task, choose_launch
from palkit.report.study_accuracy import add_study_accuracy
from palkit.report.verdict import Calibration, Verdict, calibration, verdict


@dataclass
class Report:
    """Everything report.json holds, and the typed inputs report.md is written from."""
    generated: str
    inputs: dict[str, list[str]]
    machines: list[JsonObject]
    recommended: Verdict | None
    calibration: Calibration | None
    summary: ReferenceSummary
    targets: dict[str, TargetCheck]
    pairwise: list[PairwiseRow]
    ceiling_fraction: list[CeilingShare]
    frontier: Frontier | None
    add_task: AddTaskAdvice
    charts: list[Chart]
    measurements: Measurements
    host_notes: list[str]
    hosts: list[BenchFile] = field(default_factory=list, metadata=INTERNAL)
    devices: list[DeviceFile] = field(default_factory=list, metadata=INTERNAL)

    def to_json(self) -> JsonObject:
        out = {k: to_json(getattr(self, k)) for k in (
            "generated", "inputs", "machines", "recommended", "calibration", "summary",
            "targets", "pairwise", "ceiling_fraction", "frontier", "add_task", "host_notes")}
        return {**out, "headline_sources": to_json(self.summary.sources),
                "charts": {c.name: c.file for c in self.charts},
                "measurements": to_json(self.measurements.items)}

    def summary_json(self, report_path: Path) -> JsonObject:
        """summary.json: the recommended configuration first, then the run's calibration, then
        the paper's all-layer PALs (the flat keys) against their targets."""
        return {"recommended": to_json(self.recommended), "calibration": to_json(self.calibration),
                **self.summary.to_json(), "sources": to_json(self.summary.sources),
                "report": str(report_path)}


def build_report(bench_files: list[Path], device_files: list[Path], out: Path,
                 summary_path: Path | None = None, accuracy_file: Path | None = None,
                 int8_accuracy_file: Path | None = None,
                 later_tasks_file: Path | None = None) -> Report:
    if not bench_files and not device_files:
        raise ReportError("nothing to report: give --bench FILE (from `palkit bench`) and/or "
                          "--device-results FILE (from the Android app)")
    m = Measurements()
    hosts, devices = read_inputs(bench_files, device_files, m)
    study = read_study(accuracy_file) if accuracy_file is not None else None
    bench = hosts[0] if hosts else None   # the first host file speaks for the report
    summary = paper_reference(bench, m) if bench else no_host_summary()
    _check_sources(summary, m)
    deployment = frontier(bench, m, study) if bench and study else None
    if deployment is not None:
        _join_frontier(summary, deployment)
    if int8_accuracy_file is not None:
        if bench is None or study is None:
            raise ReportError("--int8-accuracy needs --accuracy (the study's table, for the "
                              "separate models) and a host --bench file")
        pal = reference_pal(bench, m)
        add_study_accuracy(summary, m, study, read_int8_scores(int8_accuracy_file),
                           bench.subjects[pal].runtime if pal else None)
    later = advise_add_task(read_later_tasks(later_tasks_file) if later_tasks_file else None,
                            str(later_tasks_file) if later_tasks_file else None)
    launch = choose_launch(bench) if bench else None
    rec, rec_notes = verdict(bench, m, launch, study) if bench and launch else (None, [])
    summary.notes = [*rec_notes, *summary.notes, *later.notes]
    out.mkdir(parents=True, exist_ok=True)
    report = Report(
        time.strftime("%Y-%m-%d %H:%M:%S"),
        {"bench": [str(f) for f in bench_files], "device_results": [str(f) for f in device_files]},
        [{"label": d.machine.label, "file": d.path, **d.machine.facts} for d in [*hosts, *devices]],
        rec, calibration(bench) if bench else None, summary, check_targets(summary),
        pairwise(hosts, m), ceiling_fraction(hosts, m), deployment, later,
        write_charts(hosts, m, out, deployment, launch.bundle.name if launch and launch.bundle
                     else None),
        m, [n for h in hosts for n in h.notes], hosts, devices)
    write_text(out / "report.json", json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n")
    write_text(out / "report.md", render_markdown(report))
    if summary_path is not None:
        write_text(summary_path, json.dumps(report.summary_json(out / "report.json"),
                                            indent=1) + "\n")
    return report


def _join_frontier(summary: ReferenceSummary, deployment: Frontier) -> None:
    """The frontier measures what the paper's reference alone could not: the best placement."""
    choice = deployment.recommendation
    summary.drop_missing(PLACEMENT_KEYS)
    summary.notes += choice.summary_notes()
    for key in PLACEMENT_KEYS:
        summary.values[key] = getattr(choice, key)
    best = next((p for p in deployment.points if p.name == choice.best_placement), None)
    summary.sources["all_tasks_ratio_best_placement"] = best.sources if best else []


def _check_sources(summary: ReferenceSummary, m: Measurements) -> None:
    """Every id a summary value cites is a measurement of the report."""
    for key, ids in summary.sources.items():
        missing = [i for i in ids if i not in m.items]
        if summary.values.get(key) is not None and missing:
            raise ReportError(f"internal: headline {key} cites unknown measurements {missing}")
