"""Rich tables for what commands print on stdout: metrics in points, predictions."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

_stdout = Console(highlight=False)

# metric key suffix -> column heading; Pearson/Spearman are shown ×100 like accuracies
METRICS = {"acc": "accuracy", "f1": "F1", "precision": "precision", "recall": "recall",
           "micro_f1": "micro F1", "pearson": "Pearson", "spearman": "Spearman"}
SENTENCE = "_sentence_acc"  # trainer/metrics.py's sentence_key


def points(value: float | None) -> str:
    """A score in points (×100, one decimal); – when missing."""
    return "–" if value is None else f"{value * 100:.1f}"


def metrics_table(result: dict[str, Any], title: str) -> None:
    """One row per task, one column per metric, in points (×100); the average in its own column
    and row."""
    tasks = result["tasks"]
    present = [m for m in METRICS if any(f"{t}_{m}" in result for t in tasks)]
    table = Table(title=title, title_justify="left")
    table.add_column("task")
    for m in present:
        table.add_column(METRICS[m], justify="right")
    table.add_column("average", justify="right")
    for t in tasks:
        table.add_row(t, *(points(result.get(f"{t}_{m}")) for m in present), "")
    sentences = [k for k in result if k.endswith(SENTENCE)]
    for key in sentences:
        table.add_row("sentence", points(result[key]) if "acc" in present else "",
                      *[""] * (len(present) - ("acc" in present)), "")
    table.add_section()
    table.add_row("all tasks", *[""] * len(present), points(result["avg"]))
    _stdout.print(table)
    notes = ["average: mean of the accuracies, span F1s and (Pearson+1)/2, in points"]
    for key in sentences:
        notes.append(f"sentence: {' and '.join(key[:-len(SENTENCE)].split('+'))} both "
                     "wholly right on a text (every label, every tag)")
    if sentences:
        notes.append("a multi_label task's accuracy is exact-set accuracy; a tagging task's F1, "
                     "precision and recall are over CoNLL spans")
    for note in notes:
        _stdout.print(note, style="dim")


def predictions_table(rows: list[dict[str, str]], note: str) -> None:
    """Predictions: task, what it read, its answer, latency; then one line of context."""
    table = Table()
    for heading, justify in (("task", "left"), ("read", "left"), ("prediction", "left"),
                             ("latency", "right")):
        table.add_column(heading, justify=justify, overflow="fold")
    for r in rows:
        table.add_row(r["task"], r["read"], r["prediction"], r["latency"])
    _stdout.print(table)
    _stdout.print(note, style="dim")


def verdict_table(title: str, rows: list[tuple[str, str, str]]) -> None:
    """The report's verdict: each line, its value (a ratio with its 95% interval) and what the
    interval lets it say."""
    table = Table(title=title, title_justify="left")
    table.add_column("what", overflow="fold", ratio=1)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("reads", overflow="fold")
    for what, value, reads in rows:
        table.add_row(what, value, reads)
    _stdout.print(table)


def targets_table(targets: dict[str, dict[str, Any]], title: str,
                  intervals: dict[str, list[float]] | None = None) -> None:
    """The report's headline: each target, its measured value (with its 95% interval where it
    was timed in pairs) and whether it is met (report.md and report.json key each row by its
    id)."""
    table = Table(title=title, title_justify="left")
    table.add_column("what", overflow="fold", ratio=1)
    for heading, justify in (("measured", "right"), ("target", "right"), ("met", "center")):
        table.add_column(heading, justify=justify, no_wrap=True)
    verdict = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]–[/]"}
    for key, t in targets.items():
        value = "–" if t["value"] is None else f"{t['value']:.3g}"
        if key in (intervals or {}):
            value += " [{:.3g}, {:.3g}]".format(*intervals[key])  # type: ignore[index]
        table.add_row(t["what"], value, t["target"], verdict[t["met"]])
    _stdout.print(table)
