"""`palkit report`: the report package's command (parsing only; the work is in build.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from palkit.bench.options import DEFAULT_BENCH_OUT
from palkit.core.options import MEASURE

app = typer.Typer()
# Default outputs go under runs/reports/ (git-ignored), never over the committed reports/.
DEFAULT_REPORT_OUT = Path("runs/reports/report")


@app.command(rich_help_panel=MEASURE, epilog="Example: palkit report --bench "
             "runs/reports/bench-host.json")
def report(
    bench_files: Annotated[Optional[list[Path]], typer.Option(
        "--bench", metavar="FILE", help=f"host bench JSON (repeatable; default "
        f"{DEFAULT_BENCH_OUT} when no --device-results)")] = None,
    device_results: Annotated[Optional[list[Path]], typer.Option(
        metavar="FILE", help="benchmark JSON exported by the Android app on a phone "
        "(repeatable)")] = None,
    out: Annotated[Path, typer.Option(metavar="DIR", help="report folder")] = DEFAULT_REPORT_OUT,
    summary: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="also write the headline here (e.g. reports/summary.json)")] = None,
    accuracy: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="a study's table (`palkit study-results`, e.g. "
        "results/converged.json): adds the deployment frontier and the recommendation, joined "
        "to bundles named after its configurations")] = None,
    int8_accuracy: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="the PAL model's scores in fp32 and per runtime's int8 bundle (e.g. "
        "results/converged-int8.json), with --accuracy: fills the headline's accuracy keys when "
        "the bench ran with --no-accuracy")] = None,
    later_tasks: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="a leave-one-out study of adding a task later (e.g. "
        "results/later-tasks.json in palkit's repository): adds how to add the next task")] = None,
) -> None:
    """Write report.md, report.json and charts from bench results (host and phone).

    First the verdict on the configuration palkit recommends (the shared trunk, a task added
    later as top-1 PALs) against the three separate models, each latency ratio from paired
    timing with its 95% interval; then the run's calibration; then the paper's all-layer PALs
    against their targets, where benched. Tables and two charts in report.md.
    """
    from palkit.report.build import build_report
    from palkit.report.recommended import calibration_rows, verdict_rows
    from palkit.ui.progress import say
    from palkit.ui.tables import targets_table, verdict_table

    if not bench_files and not device_results:
        bench_files = [DEFAULT_BENCH_OUT]
    result = build_report(bench_files or [], device_results or [], out, summary, accuracy,
                          int8_accuracy, later_tasks)
    rec, cal = result["recommended"], result["calibration"]
    if rec is not None:
        verdict_table(f"recommended: {rec['bundle']} / {rec['versus']} (below 1x: the bundle is "
                      "smaller or faster)", verdict_rows(rec))
    for note in result["summary"]["notes"]:
        if note.startswith("recommended configuration"):
            say(note)
    if cal is not None:
        verdict_table("calibration: pairs whose true ratio is 1.00"
                      + (" -- NOISY RUN: " + "; ".join(cal["why"]) if cal["noisy"] else ""),
                      calibration_rows(cal))
        if cal["not_measured"]:
            say(f"calibration: not measured: {', '.join(cal['not_measured'])} (bench a "
                "shared-trunk bundle beside the separate models of its runtime)")
    for note in result["add_task"]["notes"][:1]:  # the recommendation, or what is missing
        typer.echo(note)
    targets = result["targets"]
    if any(t["value"] is not None for t in targets.values()):
        targets_table(targets, "the paper's reference, all-layer PALs, against its targets",
                      result["summary"].get("intervals"))
        # each of its rows left empty, with its reason
        notes = result["summary"].get("notes") or []
        for key, target in targets.items():
            if target["value"] is None:
                why = next((n.split(": ", 1)[1] for n in notes if n.startswith(f"{key}: ")),
                           "not measured (see report.md)")
                say(f"not measured: {key}: {why}")
    else:
        say("the paper's reference (all-layer PALs) was not benched: its targets are in "
            "report.md; bench bundles/pals beside the others to fill them")
    for note in result["host_notes"]:
        say(f"bench note: {note}")
    typer.echo(f"wrote {out / 'report.md'}, {out / 'report.json'} and "
               f"{len(result['charts'])} charts" + (f"; summary {summary}" if summary else ""))
