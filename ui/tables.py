"""Rich tables for what commands print on stdout: metrics in points, predictions."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

_stdout = Console(highlight=False)

# metric key suffix -> column heading; Pearson/Spearman are shown ×100 like accuracies
METRICS = {"acc": "accuracy", "f1": "F1", "pearson": "Pearson", "spearman": "Spearman"}


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
    table.add_section()
    table.add_row("all tasks", *[""] * len(present), points(result["avg"]))
    _stdout.print(table)
    _stdout.print("average: mean of the accuracies and (Pearson+1)/2, in points", style="dim")


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


def comparison_table(report: dict[str, Any]) -> None:
    """What `palkit report` exists for, on one screen: each benchmarked bundle of several tasks
    (on ExecuTorch, the phone's runtime, where measured) against each separate model and peer
    (ratios, so below 1 is the bundle smaller or faster)."""
    rows = [p for p in report["pairwise"] if p["other_role"] in ("separate", "peer")]
    bundles = list(dict.fromkeys(p["pal"] for p in rows))
    for pal in [b for b in bundles if b.endswith("/executorch")] or bundles[:1]:
        table = Table(title=f"{pal} / each other model, bytes and p50 latency (below 1x: {pal} "
                            "is smaller or faster)", title_justify="left")
        for heading, justify in (("other", "left"), ("bytes", "right"), ("one task", "right"),
                                 ("all tasks on one input", "right")):
            table.add_column(heading, justify=justify, no_wrap=True)
        for p in (p for p in rows if p["pal"] == pal):
            tasks = [v for k, v in p["latency"].items() if k.startswith("task:")]
            every = next((v for k, v in p["latency"].items() if k.startswith("all_tasks")), None)
            table.add_row(p["other"], f"{p['size_ratio']:.2f}x",
                          f"{sum(tasks) / len(tasks):.2f}x" if tasks else "–",
                          "–" if every is None else f"{every:.2f}x")
        _stdout.print(table)


def targets_table(targets: dict[str, dict[str, Any]], title: str) -> None:
    """The report's headline: each target, its measured value and whether it is met (report.md
    and report.json key each row by its id)."""
    table = Table(title=title, title_justify="left")
    table.add_column("what", overflow="fold", ratio=1)
    for heading, justify in (("measured", "right"), ("target", "right"), ("met", "center")):
        table.add_column(heading, justify=justify, no_wrap=True)
    verdict = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]–[/]"}
    for t in targets.values():
        value = "–" if t["value"] is None else f"{t['value']:.3g}"
        table.add_row(t["what"], value, t["target"], verdict[t["met"]])
    _stdout.print(table)
