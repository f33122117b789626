"""The report's figures, each small enough to take in at once (at most 1600 x 1000 px), all from
the first host file:

- headline.png: the paired ratios the verdict quotes (verdict_chart.py), or for a bench without
  paired timing each subject's bytes and unpaired p50s (p50_chart.py);
- accuracy_vs_size.png: where the bench scored accuracy;
- frontier.png: with `report --accuracy`, each study configuration's accuracy against cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from palkit.bench.schema import measurement_id
from palkit.report.frontier import Frontier, FrontierPoint
from palkit.report.model import MiB, BenchFile, Measurements, Subject
from palkit.report.p50_chart import ROLE_COLOR, draw_p50, p50_rows
from palkit.report.paper_reference import TARGETS
from palkit.report.recommend import REFERENCE_CONFIGURATION, WITHIN_POINTS, ShipChoice
from palkit.report.selection import accuracy_split, source_run, total_bytes
from palkit.report.verdict_chart import cost_bars, draw_verdict, has_pairs, ratio_groups
from palkit.ui.plots import pyplot, save

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RUNTIME_MARKER = {"executorch": ("o", "ExecuTorch"), "onnxruntime": ("s", "ONNX Runtime"),
                  "torch": ("D", "PyTorch")}
STYLE = {"font.size": 14, "axes.titlesize": 15, "axes.labelsize": 14, "legend.fontsize": 13,
         "xtick.labelsize": 13, "ytick.labelsize": 14}


@dataclass(frozen=True)
class Chart:
    name: str
    file: str
    caption: str     # report.md's line under it


def write_charts(hosts: list[BenchFile], m: Measurements, out: Path,
                 deployment: Frontier | None = None, launch: str | None = None) -> list[Chart]:
    """The figures written into `out` (none without a host file)."""
    if not hosts:
        return []
    bench = hosts[0]
    plt = pyplot()
    charts = []
    with plt.rc_context(STYLE):
        if has_pairs(bench):
            groups = ratio_groups(bench, launch)
            bundles = [g.bundle for g in groups if g.bundle]
            save(draw_verdict(groups, cost_bars(bench, m, bundles), bench), out / "headline.png")
            charts.append(Chart("headline", "headline.png", (
                "each time ratio the bench timed in pairs, with its 95% interval (log scale; "
                "grey band: level, 1.00 ± 3%), bundle by bundle with the run's A/A calibration, "
                "beside each bundle's bytes and memory over the separate models'; a black tick "
                "marks a target")))
        elif rows := p50_rows(bench, m):
            save(draw_p50(rows, bench), out / "headline.png")
            charts.append(Chart("headline", "headline.png", (
                "PAL bundle against three separate models and the peers, at the headline's "
                "condition; latencies are single-round p50s, not paired; a black tick marks "
                "where a bar's target lies")))
        points, lines = accuracy_points(bench, m)
        if points:
            save(draw_accuracy(points, lines, bench), out / "accuracy_vs_size.png")
            charts.append(Chart("accuracy_vs_size", "accuracy_vs_size.png", (
                "accuracy of each benchmarked bundle against its size; dashed lines: the same "
                "runs in fp32 (PyTorch)")))
        timed = [p for p in (deployment.points if deployment else []) if p.all_tasks_ms]
        if deployment and timed:
            frontier_figure(timed, deployment.recommendation, bench, out / "frontier.png")
            charts.append(Chart("frontier", "frontier.png", (
                "each study configuration's accuracy against the latency of all three tasks on "
                "one input; bubble area = task-specific bytes")))
    return charts


# ---- accuracy vs size --------------------------------------------------------------------------

@dataclass(frozen=True)
class AccuracyPoint:
    family: str       # the training run its models came from
    runtime: str
    mib: float
    acc: float


@dataclass(frozen=True)
class Fp32Line:
    family: str
    acc: float
    separate: bool


def accuracy_points(bench: BenchFile, m: Measurements) -> tuple[list[AccuracyPoint],
                                                                 list[Fp32Line]]:
    """Bundle points (size, average, the run they came from, runtime) and fp32 reference lines."""
    split = accuracy_split(bench)
    runs = {n: e.run for n, e in bench.accuracy.items() if e.fp32_reference and e.run}
    points, lines = [], []
    for name, entry in bench.accuracy.items():
        v = m.get(measurement_id(bench.prefix, "accuracy", name, split, "avg"))
        if v is None:
            continue
        if name in runs:
            lines.append(Fp32Line(Path(runs[name]).name, v, entry.kind == "separate"))
            continue
        size = total_bytes(m, bench.prefix, name)
        subject = bench.subjects.get(name)
        if subject is not None and size is not None:
            points.append(AccuracyPoint(_family(bench, subject) or name.split("/")[0],
                                        subject.runtime, size / MiB, v))
    return points, lines


def _family(bench: BenchFile, subject: Subject) -> str | None:
    """The name of the training run a subject's models came from."""
    run = source_run(bench, subject)
    return Path(bench.accuracy[run].run or "").name if run is not None else None


# The y axis shows at least this many points either side of the data: a gap of a tenth of a
# point must look as small as it is, not fill the chart.
ACCURACY_PAD_POINTS = 1.0


def draw_accuracy(points: list[AccuracyPoint], lines: list[Fp32Line],
                  bench: BenchFile) -> Figure:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = pyplot()
    split = accuracy_split(bench)
    families = sorted({p.family for p in points} | {ln.family for ln in lines})
    color = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for p in points:
        marker = RUNTIME_MARKER.get(p.runtime, ("o", p.runtime))[0]
        ax.scatter(p.mib, p.acc, s=110, marker=marker, color=color[p.family],
                   edgecolor="black", linewidth=0.6, zorder=3)
    right = max(p.mib for p in points) * 1.15
    for ln in lines:
        ax.axhline(ln.acc, color=color[ln.family], linestyle="--", linewidth=1.5)
        ax.text(0, ln.acc, f" fp32 {ln.acc:.1f}", va="bottom", color=color[ln.family])
    separate = [ln.acc for ln in lines if ln.separate]
    gap = TARGETS["accuracy_gap_pal_int8_vs_separate_fp32"][1]
    bounds = [separate[0] + gap] if separate else []
    for bound in bounds:
        ax.axhline(bound, color="black", linestyle=":", linewidth=1.5)
        ax.text(0, bound, f" target {bound:.1f}", va="bottom")
    ax.set_xlim(0, right)
    shown = [p.acc for p in points] + [ln.acc for ln in lines] + bounds
    pad = max(ACCURACY_PAD_POINTS, 0.08 * (max(shown) - min(shown)))
    ax.set_ylim(min(shown) - pad, max(shown) + pad)
    ax.set_xlabel("MiB on disk, all tasks (bundles as exported)")
    ax.set_ylabel(f"average score, {split} (points)")
    ax.set_title(f"accuracy vs size\n{bench.machine.label}")
    ax.grid(alpha=0.3)
    handles = [Patch(color=color[f], label=f) for f in families]
    handles += [Line2D([], [], marker=mk, linestyle="", markersize=10, color="white",
                       markeredgecolor="black", label=name)
                for rt, (mk, name) in RUNTIME_MARKER.items() if any(p.runtime == rt for p in points)]
    handles.append(Line2D([], [], color="#555555", linestyle="--", label="same run, fp32 in PyTorch"))
    if separate:
        handles.append(Line2D([], [], color="black", linestyle=":",
                              label=f"target: separate fp32 − {-gap:g} point"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


# ---- deployment frontier ------------------------------------------------------------------------

def frontier_figure(points: list[FrontierPoint], choice: ShipChoice, bench: BenchFile,
                    path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 6.5))
    reference = next((p for p in points if p.name == REFERENCE_CONFIGURATION), None)
    if reference is not None:   # the configurations the recommendation may choose from
        floor = reference.accuracy - WITHIN_POINTS
        ax.axhspan(floor, reference.accuracy + 2 * WITHIN_POINTS, color="#55a868", alpha=0.08)
        ax.axhline(floor, color="#55a868", linestyle=":", linewidth=1.5)
        ax.text(1, floor, f" {WITHIN_POINTS:g} point below {REFERENCE_CONFIGURATION}",
                va="bottom", color="#3a7a48")
        ax.set_ylim(floor - WITHIN_POINTS / 2, reference.accuracy + 1.5 * WITHIN_POINTS)
    largest = max(p.task_specific_bytes or 0 for p in points)
    for p in points:
        area = 150 + 2500 * (p.task_specific_bytes or 0) / largest
        color = ROLE_COLOR["separate"] if p.role in ("separate", "peer") else ROLE_COLOR["pal"]
        ax.scatter(p.all_tasks_ms, p.accuracy, s=area, color=color, alpha=0.55,
                   edgecolor="black", linewidth=0.8, zorder=3)
        if p.accuracy_sd:
            ax.errorbar(p.all_tasks_ms, p.accuracy, yerr=p.accuracy_sd, color="black",
                        capsize=4, linewidth=1, zorder=4)
        picked = [use for use, chosen in (("all tasks", choice.all_tasks),
                                          ("one task", choice.one_task)) if chosen == p.name]
        label = p.name + (f"  ← ship ({', '.join(picked)})" if picked else "")
        # a large bubble is labelled beneath it, where a neighbour's bubble cannot sit
        radius = math.sqrt(area / math.pi)   # points: scatter's s is an area in points²
        big = radius > 15
        ax.annotate(label, (p.all_tasks_ms, p.accuracy),
                    xytext=(0, -radius - 4) if big else (10, 6), textcoords="offset points",
                    ha="center" if big else "left", va="top" if big else "baseline",
                    fontsize=12, fontweight="bold" if picked else "normal")
    ax.set_xlim(0, max(p.all_tasks_ms or 0 for p in points) * 1.45)
    ax.set_xlabel("all three tasks on one input, ms (p50, 128 tokens, 1 thread, ExecuTorch int8)")
    ax.set_ylabel(f"average score, {points[0].split} (points; mean ± sd over seeds)")
    ax.set_title(f"deployment frontier · bubble area = task-specific bytes\n"
                 f"{bench.machine.label}", fontsize=14)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, path)
