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

    Size, latency, memory and accuracy tables, two charts, and the headline against the targets,
    printed as a table.
    """
    from palkit.report.build import build_report
    from palkit.ui.progress import say
    from palkit.ui.tables import comparison_table, targets_table

    if not bench_files and not device_results:
        bench_files = [DEFAULT_BENCH_OUT]
    result = build_report(bench_files or [], device_results or [], out, summary, accuracy,
                          int8_accuracy, later_tasks)
    comparison_table(result)
    targets_table(result["targets"], "headline against the targets")
    for note in result["add_task"]["notes"][:1]:  # the recommendation, or what is missing
        typer.echo(note)
    # On the terminal, not only in report.md: each headline row left empty, with its reason,
    # and the bench's own notes (they name the command that fills the gap).
    notes = result["summary"].get("notes") or []
    for key, target in result["targets"].items():
        if target["value"] is None:
            why = next((n.split(": ", 1)[1] for n in notes if n.startswith(f"{key}: ")),
                       "not measured (see report.md)")
            say(f"not measured: {key}: {why}")
    for note in result["host_notes"]:
        say(f"bench note: {note}")
    typer.echo(f"wrote {out / 'report.md'}, {out / 'report.json'} and "
               f"{len(result['charts'])} charts" + (f"; summary {summary}" if summary else ""))
