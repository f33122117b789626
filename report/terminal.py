"""What `palkit report` prints: the verdict and the run's calibration (with its timing plan), how
to add a task later, the paper's reference against its targets with the reason for each row left
empty, and the bench's own notes."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from palkit.report.model import NoteKind, to_json
from palkit.report.recommend import ADD_TASK, LAUNCH
from palkit.report.verdict import calibration_rows, timing_plan_line, verdict_rows
from palkit.ui.progress import say
from palkit.ui.tables import targets_table, verdict_table

if TYPE_CHECKING:
    from palkit.report.build import Report


def print_report(report: Report, out: Path, summary: Path | None) -> None:
    """The report's verdict first (stdout); what was not measured on stderr."""
    _print_verdict(report)
    for note in report.add_task.notes:   # the recommendation, or what is missing
        if ADD_TASK in note.about and note.kind in (NoteKind.ADVICE, NoteKind.MISSING):
            typer.echo(note.text)
    _print_reference(report)
    for note in report.host_notes:
        say(f"bench note: {note}")
    typer.echo(f"wrote {out / 'report.md'}, {out / 'report.json'} and {len(report.charts)} charts"
         + (f"; summary {summary}" if summary else ""))


def _print_verdict(report: Report) -> None:
    rec, cal = report.recommended, report.calibration
    if rec is not None:
        verdict_table(f"recommended: {rec.bundle} / {rec.versus} (below 1x: the bundle is "
                      "smaller or faster)", verdict_rows(rec))
    for note in report.summary.notes:
        if LAUNCH in note.about:
            say(note.text)
    if cal is None:
        return
    verdict_table("calibration: pairs whose true ratio is 1.00"
                  + (" -- NOISY RUN: " + "; ".join(cal.why) if cal.noisy else ""),
                  calibration_rows(cal))
    if cal.timing_plan is not None:
        typer.echo(timing_plan_line(cal.timing_plan))
    if cal.not_measured:
        say(f"calibration: not measured: {', '.join(cal.not_measured)} (bench a shared-trunk "
            "bundle beside the separate models of its runtime)")


def _print_reference(report: Report) -> None:
    """The paper's reference, each row left empty with its reason; or one line without it."""
    targets = report.targets
    if not any(t.value is not None for t in targets.values()):
        say("the paper's reference (all-layer PALs) was not benched: its targets are in "
            "report.md; bench bundles/pals beside the others to fill them")
        return
    targets_table({k: to_json(t) for k, t in targets.items()},  # type: ignore[misc]
                  "the paper's reference, all-layer PALs, against its targets",
                  report.summary.intervals)  # type: ignore[arg-type]
    for key, target in targets.items():
        if target.value is None:
            why = next((n.reason for n in report.summary.notes if n.says_missing(key)),
                       "not measured (see report.md)")
            say(f"not measured: {key}: {why}")
