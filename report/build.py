"""`palkit report`: turn palkit-bench files (host and phone) into report.md / report.json / PNGs.

The steps: ingest.py (measurements with ids), recommended.py (the verdict on the configuration
palkit recommends, with the run's calibration), headline.py (the paper's all-layer PALs against
their targets), charts.py (the figures) and markdown.py (report.md).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from palkit.core.fileio import write_text
from palkit.report.charts import write_charts
from palkit.report.frontier import add_task_recommendation, frontier
from palkit.report.headline import (SUMMARY_KEYS, ceiling_fraction, check_targets, headline,
                                    headline_pal, pairwise)
from palkit.report.ingest import (Measurements, ReportError, host_subjects, machine_label,
                                  read_inputs)
from palkit.report.markdown import render_markdown
from palkit.report.recommended import calibration, recommended
from palkit.report.study_accuracy import add_study_accuracy


def build_report(bench_files: list[Path], device_files: list[Path], out: Path,
                 summary_path: Path | None = None, accuracy_file: Path | None = None,
                 int8_accuracy_file: Path | None = None,
                 later_tasks_file: Path | None = None) -> dict[str, Any]:
    if not bench_files and not device_files:
        raise ReportError("nothing to report: give --bench FILE (from `palkit bench`) and/or "
                          "--device-results FILE (from the Android app)")
    m = Measurements()
    hosts, devices = read_inputs(bench_files, device_files, m)
    if hosts:  # the headline of the first host file, every cited id checked to exist
        summary, sources = headline(hosts[0].data, hosts[0].key, m)
        for key, ids in sources.items():
            missing = [i for i in ids if i not in m.items]
            if summary.get(key) is not None and missing:
                raise ReportError(f"internal: headline {key} cites unknown measurements {missing}")
    else:
        summary, sources = {k: None for k in SUMMARY_KEYS}, {}
        summary["notes"] = ["no host bench file: the headline needs `palkit bench` results"]
    deployment = None
    if accuracy_file is not None and hosts:
        deployment = frontier(hosts[0].data, hosts[0].key, m, accuracy_file)
        _add_frontier_summary(summary, sources, deployment)
    if int8_accuracy_file is not None:
        if accuracy_file is None or not hosts:
            raise ReportError("--int8-accuracy needs --accuracy (the study's table, for the "
                              "separate models) and a host --bench file")
        pal = headline_pal(hosts[0].data, hosts[0].key, m)
        runtime = host_subjects(hosts[0].data)[pal]["runtime"] if pal else None
        add_study_accuracy(summary, sources, m, accuracy_file, int8_accuracy_file, runtime)
    add_task = add_task_recommendation(later_tasks_file)
    study_rows = json.loads(Path(accuracy_file).read_text())["rows"] if accuracy_file else None
    rec, rec_notes = (recommended(hosts[0].data, hosts[0].key, m, study_rows) if hosts
                      else (None, []))
    cal = calibration(hosts[0].data) if hosts else None
    summary["notes"] = [*rec_notes, *summary["notes"], *add_task["notes"]]
    out.mkdir(parents=True, exist_ok=True)
    report = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
              "inputs": {"bench": [str(f) for f in bench_files],
                         "device_results": [str(f) for f in device_files]},
              "machines": [{"label": machine_label(d["machine"]), "file": f, **d["machine"]}
                           for _, d, f in hosts + devices],
              "recommended": rec, "calibration": cal,
              "summary": summary, "headline_sources": sources, "targets": check_targets(summary),
              "pairwise": pairwise(hosts, m), "ceiling_fraction": ceiling_fraction(hosts, m),
              "frontier": deployment, "add_task": add_task,
              "charts": write_charts(hosts, m, out, deployment), "measurements": m.items,
              "host_notes": [n for _, d, _ in hosts for n in d.get("notes", [])]}
    write_text(out / "report.json", json.dumps(report, indent=1, sort_keys=True) + "\n")
    write_text(out / "report.md", render_markdown(report, hosts, devices))
    if summary_path is not None:
        # The recommended configuration first, then the run's calibration, then the paper's
        # all-layer PALs (the flat keys) against their targets.
        write_text(summary_path, json.dumps({"recommended": rec, "calibration": cal,
                                             **{k: summary[k] for k in SUMMARY_KEYS},
                                             "sources": sources,
                                             "report": str(out / "report.json")},
                                            indent=1) + "\n")
    return report


def _add_frontier_summary(summary: dict[str, Any], sources: dict[str, Any],
                          deployment: dict[str, Any]) -> None:
    """The frontier's two summary keys, with the placement and the recommendations in notes."""
    rec = deployment["recommendation"]
    best = {p["name"]: p for p in deployment["points"]}.get(rec["best_placement"])
    summary["all_tasks_ratio_best_placement"] = rec["all_tasks_ratio_best_placement"]
    summary["best_placement_accuracy_gap"] = rec["best_placement_accuracy_gap"]
    sources["all_tasks_ratio_best_placement"] = best["sources"] if best else []
    # The headline marked these two "not measured" before the frontier was joined in.
    stale = ("all_tasks_ratio_best_placement:", "best_placement_accuracy_gap:")
    summary["notes"] = [*(n for n in summary["notes"] if not n.startswith(stale)), *rec["notes"],
                        f"best placement (all tasks / one task, within the accuracy bound): "
                        f"{rec['best_placement']}",
                        f"recommended for all tasks on every input: {rec['all_tasks']}; for one "
                        f"task at a time: {rec['one_task']}"]
