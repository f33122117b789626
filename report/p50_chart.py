"""The headline figure of a bench file without paired timing: each subject's bytes, and its
one-task and all-tasks p50 from single interleaved rounds, titled as unpaired (a machine's drift
between rounds can move them more than the bundles differ; verdict_chart.py draws the paired
ratios where the bench timed them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from palkit.bench.schema import p50_id
from palkit.report.model import MiB, BenchFile, Measurements
from palkit.report.paper_reference import TARGETS
from palkit.report.selection import (pal_groups, plain_subjects, reference_condition,
                                     size_reference, task_p50, total_bytes)
from palkit.ui.plots import pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROLE_COLOR = {"pal": "#c44e52", "native": "#dd8452", "separate": "#4c72b0", "peer": "#8c8c8c"}
ROLE_LEGEND = {"pal": "PAL bundle (one trunk, all tasks)",
               "native": "PAL bundle, the app's C++ path", "separate": "separate models (ours)",
               "peer": "peer: separate models"}
ROLE_ORDER = ("pal", "native", "separate", "peer")


@dataclass
class Row:
    """One subject's bar in each panel; a target is where its bar should end at most."""
    label: str
    role: str
    mib: float | None
    one_ms: float | None
    all_ms: float | None
    all_program: bool
    size_target: float | None = None
    one_target: float | None = None
    all_target: float | None = None


def p50_rows(bench: BenchFile, m: Measurements) -> list[Row]:
    threads, seq = reference_condition(bench)
    prefix, subjects = bench.prefix, bench.subjects
    all_layer, top_half = pal_groups(subjects)
    all_bound = {n: TARGETS["all_tasks_ratio_all_layers"][1] for n in all_layer}
    all_bound.update({n: TARGETS["all_tasks_ratio_top_half"][1] for n in top_half})

    def one_task(name: str) -> float | None:
        return task_p50(m, prefix, name, subjects[name].tasks, threads, seq)[0]
    rows = []
    by_role = sorted(subjects.values(), key=lambda s: ROLE_ORDER.index(s.role or "peer"))
    for s in by_role:
        one = one_task(s.name)
        all_id = p50_id(prefix, s.name, "all_tasks", threads, seq)
        measured = m.items.get(all_id)
        row = Row(s.label, s.role or "peer", _mib(total_bytes(m, prefix, s.name)), one,
                  m.get(all_id), getattr(measured, "all_tasks_mode", None) == "program")
        if row.role == "pal":
            ref = size_reference(subjects, s.name)
            row.size_target = _times(TARGETS["size_ratio_vs_three_separate"][1],
                                     _mib(total_bytes(m, prefix, ref)) if ref else None)
            plain = plain_subjects(subjects, s.name)
            row.one_target = _times(TARGETS["latency_ratio_pal_vs_plain"][1],
                                    one_task(plain[0]) if plain else None)
            row.all_target = _times(all_bound.get(s.name), one)
        if row.mib is not None or row.one_ms is not None:
            rows.append(row)
    return rows


def _mib(v: float | None) -> float | None:
    return None if v is None else v / MiB


def _times(bound: float | None, v: float | None) -> float | None:
    return bound * v if bound is not None and v is not None else None


def draw_p50(rows: list[Row], bench: BenchFile) -> Figure:
    plt = pyplot()
    threads, seq = reference_condition(bench)
    # at most 16 x 10 inches: 1600 x 1000 px, one screen; more rows get thinner bars
    fig, axes = plt.subplots(1, 3, figsize=(16, min(10.0, 3.2 + 0.55 * len(rows))), sharey=True)
    peers = [r.one_ms for r in rows if r.role == "peer" and r.one_ms is not None]
    peer_target = min(peers) * TARGETS["latency_ratio_pal_vs_best_peer"][1] if peers else None
    _panel(axes[0], rows, [r.mib for r in rows], [r.size_target for r in rows],
           "bundle size, all tasks", "MiB on disk", "{:.1f}")
    _panel(axes[1], rows, [r.one_ms for r in rows], [r.one_target for r in rows],
           "one task, p50 (unpaired)", "ms", "{:.1f}", line=peer_target)
    all_text = [("" if a is None else f"{a:.0f} ({a / o:.2f}×)" if o else f"{a:.0f}")
                for a, o in ((r.all_ms, r.one_ms) for r in rows)]
    hatched = [not r.all_program and r.all_ms is not None for r in rows]
    _panel(axes[2], rows, [r.all_ms for r in rows], [r.all_target for r in rows],
           "all tasks on one input, p50 (unpaired)", "ms (× one task)", "{:.0f}", all_text,
           hatched=hatched)
    targets = any(t is not None for r in rows
                  for t in (r.size_target, r.one_target, r.all_target))
    _legend(fig, rows, targets, peer_target is not None, any(hatched))
    fig.suptitle(f"{bench.machine.label} · {seq} tokens, {threads} thread(s), batch 1",
                 fontsize=15)
    b = {k: v[1] for k, v in TARGETS.items()}
    fig.text(0.01, 0.01, f"targets: size ≤ {b['size_ratio_vs_three_separate']:.2f}× three "
             f"separate int8 models · one task ≤ {b['latency_ratio_pal_vs_plain']:.2f}× plain "
             "int8 classifier on the same runtime, and ≤ the fastest peer\n"
             f"all tasks ≤ {b['all_tasks_ratio_all_layers']}× one task (all-layer PALs), "
             f"≤ {b['all_tasks_ratio_top_half']}× one task (top-half PALs); latencies from "
             "single rounds, not paired: the bench timed no pairs",
             fontsize=12, color="#333333")
    fig.tight_layout(rect=(0, 0.07, 1, 0.885))
    for ax in axes:
        fit_labels(ax)
    return fig


def _panel(ax: Axes, rows: list[Row], values: list[float | None], targets: list[float | None],
           title: str, xlabel: str, fmt: str, texts: list[str] | None = None,
           hatched: list[bool] | None = None, line: float | None = None) -> None:
    """Horizontal bars with their values, a black tick at each bar's target, a dashed `line`."""
    y = range(len(rows))
    ax.barh(list(y), [v or 0 for v in values], color=[ROLE_COLOR[r.role] for r in rows],
            edgecolor="white")
    for i, v in enumerate(values):
        if hatched and hatched[i] and v is not None:
            ax.barh(i, v, color="none", edgecolor="white", hatch="//", linewidth=0)
        text = texts[i] if texts else (fmt.format(v) if v is not None else "")
        end = max(v or 0, targets[i] or 0)  # right of the bar and of its target tick
        ax.text(end, i, f" {text}" if v is not None else " not measured", va="center")
    for i, t in enumerate(targets):
        if t is not None:
            ax.plot([t, t], [i - 0.42, i + 0.42], color="black", linewidth=3)
    if line is not None:
        ax.axvline(line, color="black", linestyle="--", linewidth=1.2)
    top = max([v for v in values + targets + [line] if v is not None], default=1.0)
    ax.set_xlim(0, top * 1.15)
    ax.set_yticks(list(y), [r.label for r in rows])
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def fit_labels(ax: Axes, pad_px: float = 6.0) -> None:
    """Widen a bar panel's x axis (from 0) until every label written in it ends inside it: a
    label's width is fixed in pixels, so the axis must reach x * W / (W - width - pad)."""
    renderer = ax.figure.canvas.get_renderer()
    width = ax.get_window_extent(renderer).width
    right = ax.get_xlim()[1]
    for text in ax.texts:
        x, room = text.get_position()[0], width - text.get_window_extent(renderer).width - pad_px
        if room > 0:
            right = max(right, x * width / room)
    ax.set_xlim(0, right)


def _legend(fig: Figure, rows: list[Row], targets: bool, peer_target: bool, hatched: bool) -> None:
    """A key for what the panels draw, and nothing they do not."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    roles = [r for r in ROLE_ORDER if any(row.role == r for row in rows)]
    handles = [Patch(color=ROLE_COLOR[r], label=ROLE_LEGEND[r]) for r in roles]
    if targets:
        handles.append(Line2D([], [], color="black", linewidth=3, label="target for that bar"))
    if peer_target:
        handles.append(Line2D([], [], color="black", linestyle="--", label="target: fastest peer"))
    if hatched:
        handles.append(Patch(facecolor="#999999", hatch="//", edgecolor="white",
                             label="tasks run one after the other"))
    fig.legend(handles=handles, loc="upper center", ncol=3, frameon=False,
               bbox_to_anchor=(0.5, 0.955))
