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
    against their targets, where benched. Tables and charts in report.md.
    """
    from palkit.report.build import build_report
    from palkit.report.terminal import print_report

    if not bench_files and not device_results:
        bench_files = [DEFAULT_BENCH_OUT]
    result = build_report(bench_files or [], device_results or [], out, summary, accuracy,
                          int8_accuracy, later_tasks)
    print_report(result, out, summary)
