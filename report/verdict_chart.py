"""The headline figure: what the verdict says. Every time ratio the bench timed in pairs, with its
95% interval, coloured by the word the interval allows (level, faster, slower, not resolved),
bundle by bundle with the run's A/A calibration; beside them each bundle's bytes and memory
against the separate models of its runtime. Single-round p50s, which a machine's drift between
rounds moves, are left to report.md's tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from palkit.bench.pairs import LEVEL_BAND, wording
from palkit.bench.schema import measurement_id
from palkit.report.model import BenchFile, Interval, Measurements, Subject, TimedPair
from palkit.report.paper_reference import TARGETS
from palkit.report.selection import pal_groups, plain_subjects, ratio, size_reference, total_bytes
from palkit.ui.plots import pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

READING_COLOR = {"level": "#6f6f6f", "faster": "#2a8c55", "slower": "#c44e52",
                 "not resolved": "#dd8452"}
# each bundle's rows in this order, as the verdict reads them
KIND_LABEL = {"identical_compute": "one task / separate model (same compute)",
              "one_task": "one task / separate model",
              "all_tasks": "all tasks / separate models in turn",
              "all_vs_one": "all tasks on one input / one task",
              "peer": "one task / {peer}"}
# the paper's targets for all-layer PALs (and top-half PALs' all tasks), by pair kind
ALL_LAYER_TARGETS = {"one_task": TARGETS["latency_ratio_pal_vs_plain"][1],
                     "peer": TARGETS["latency_ratio_pal_vs_best_peer"][1],
                     "all_vs_one": TARGETS["all_tasks_ratio_all_layers"][1]}
TOP_HALF_TARGETS = {"all_vs_one": TARGETS["all_tasks_ratio_top_half"][1]}


@dataclass(frozen=True)
class RatioRow:
    label: str
    ratio: float
    interval: Interval
    reads: str
    target: float | None = None


@dataclass(frozen=True)
class RatioGroup:
    title: str
    rows: list[RatioRow]
    bundle: str | None = None    # the bench subject whose ratios these are; None: calibration


@dataclass(frozen=True)
class CostBar:
    """A bundle's bytes and memory (all tasks resident) over its runtime's separate models'."""
    label: str
    bytes_ratio: float | None
    memory_ratio: float | None
    bytes_target: float | None


def _title(s: Subject, launch: str | None) -> str:
    kind = {"none": "shared trunk", "all": "all-layer PALs (the paper's setting)",
            "top": "top-half PALs"}.get(s.placement, f"PALs in {s.placement}")
    return f"{s.name} · " + ("recommended: " if s.name == launch else "") + kind


def _row(pair: TimedPair, target: float | None) -> RatioRow:
    assert pair.ratio is not None and pair.interval is not None
    label = KIND_LABEL[pair.kind].format(peer=pair.den.subject)
    return RatioRow(label, pair.ratio, pair.interval, wording(list(pair.interval)), target)


def ratio_groups(bench: BenchFile, launch: str | None) -> list[RatioGroup]:
    """A group per multi-task bundle the bench timed in pairs (the launch bundle first), then the
    A/A calibration pairs."""
    timed = [p for p in bench.pairs if p.ratio is not None and p.interval]
    all_layer, top_half = pal_groups(bench.subjects)
    bundles = sorted((s for s in bench.subjects.values() if s.role == "pal"
                      and any(p.num.subject == s.name and p.kind in KIND_LABEL for p in timed)),
                     key=lambda s: s.name != launch)
    groups = []
    for s in bundles:
        targets = (ALL_LAYER_TARGETS if s.name in all_layer else
                   TOP_HALF_TARGETS if s.name in top_half else {})
        rows = [_row(p, targets.get(p.kind)) for kind in KIND_LABEL for p in timed
                if p.kind == kind and p.num.subject == s.name]
        groups.append(RatioGroup(_title(s, launch), rows, s.name))
    aa = [RatioRow(f"A/A: {p.num.subject}", p.ratio, p.interval,  # type: ignore[arg-type]
                   wording(list(p.interval)))  # type: ignore[arg-type]
          for p in timed if p.kind == "aa"]
    if aa:
        groups.append(RatioGroup("calibration · true ratio 1.00", aa))
    return groups


def cost_bars(bench: BenchFile, m: Measurements, names: list[str]) -> list[CostBar]:
    prefix, subjects = bench.prefix, bench.subjects
    all_layer = pal_groups(subjects)[0]
    bars = []
    for name in names:
        reference, plain = size_reference(subjects, name), plain_subjects(subjects, name)
        memory = m.get(measurement_id(prefix, "memory", name, "model_all_tasks_program"))
        if memory is None:
            memory = m.get(measurement_id(prefix, "memory", name, "model_all_tasks"))
        separate_memory = (m.get(measurement_id(prefix, "memory", plain[0], "model_all_tasks"))
                           if plain else None)
        bars.append(CostBar(name, ratio(total_bytes(m, prefix, name),
                                        total_bytes(m, prefix, reference) if reference else None),
                            ratio(memory, separate_memory),
                            TARGETS["size_ratio_vs_three_separate"][1] if name in all_layer
                            else None))
    return bars


def draw_verdict(groups: list[RatioGroup], costs: list[CostBar], bench: BenchFile) -> Figure:
    plt = pyplot()
    slots = sum(1 + len(g.rows) for g in groups)
    # at most 16 x 10 inches: 1600 x 1000 px, one screen; more rows get thinner ones
    fig = plt.figure(figsize=(16, min(10.0, 3.0 + 0.32 * slots)), layout="constrained")
    ax, text_ax, cost_ax = fig.subplots(1, 3, sharey=True, width_ratios=(3.0, 1.05, 1.35))
    first_rows = _draw_ratios(ax, text_ax, groups)
    _draw_costs(cost_ax, [c for c in costs if c.label in first_rows], first_rows)
    _legend(ax, groups)
    pair = next(p for p in bench.pairs if p.ratio is not None)
    fig.suptitle(f"{bench.machine.label}\npaired timing · {pair.seq_len} tokens, "
                 f"{pair.threads} thread(s), batch 1", fontsize=15)
    # the footnote below the layout's rectangle: two lines of 11.5 pt need half an inch
    footnote = 0.5 / fig.get_figheight()
    fig.get_layout_engine().set(rect=(0, footnote, 1, 1), h_pad=0.12)
    fig.text(0.01, 0.008, "Each ratio: both sides in one process, in alternating blocks; the "
             "Hodges-Lehmann estimate and its 95% interval; below 1x the bundle is faster.\n"
             "Black ticks: the paper's targets for all-layer PALs (one task ≤ 1.05x its separate "
             "model, ≤ 1.00x the peer; all tasks ≤ 2.2x one; bytes ≤ 0.40x) and top-half PALs "
             "(all tasks ≤ 1.7x one).", fontsize=11.5, color="#333333")
    return fig


def _draw_ratios(ax: Axes, text_ax: Axes, groups: list[RatioGroup]) -> dict[str, float]:
    """The ratios on a log axis under a header line per group, their values in words beside
    them; returns the y of each bundle's first row."""
    from matplotlib.transforms import blended_transform_factory

    ax.axvspan(1 - LEVEL_BAND, 1 + LEVEL_BAND, color="#dcdcdc", zorder=0)
    ax.axvline(1.0, color="#444444", linewidth=1, zorder=1)
    header = blended_transform_factory(ax.transAxes, ax.transData)
    y, ticks, labels, ends, first_rows = 0.0, [], [], [], {}
    for group in groups:
        ax.text(0.005, y, group.title, transform=header, va="center", fontweight="bold",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
        if group.bundle:
            first_rows[group.bundle] = y + 1
        for row in group.rows:
            y += 1
            low, high = row.interval
            color = READING_COLOR.get(row.reads, "black")
            ax.errorbar(row.ratio, y, xerr=[[row.ratio - low], [high - row.ratio]], fmt="o",
                        color=color, ms=7, capsize=4, elinewidth=2, zorder=3)
            if row.target is not None:
                ax.plot([row.target] * 2, [y - 0.38, y + 0.38], color="black", linewidth=3)
            text_ax.text(0.03, y, f"{row.ratio:.2f}x [{low:.2f}, {high:.2f}] {row.reads}",
                         va="center", color=color, fontsize=13)
            ticks.append(y)
            labels.append(row.label)
            ends += [low, high, row.target or high]
        y += 1.5
    ax.set_xscale("log")
    low, high = min(ends + [1 - LEVEL_BAND]) / 1.2, max(ends + [1 + LEVEL_BAND]) * 1.2
    ax.set_xlim(low, high)
    marks = [x for x in (0.25, 0.5, 1, 2, 4, 8) if low <= x <= high]
    ax.set_xticks(marks, [f"{x:g}x" for x in marks])
    ax.minorticks_off()
    ax.set_yticks(ticks, labels, fontsize=13)
    ax.set_ylim(y - 1.5 + 0.7, -0.7)
    ax.set_title("time ratio and 95% interval (log scale)")
    ax.grid(axis="x", alpha=0.3)
    text_ax.set_axis_off()
    return first_rows


def _draw_costs(ax: Axes, costs: list[CostBar], first_rows: dict[str, float]) -> None:
    """Each bundle's bytes and memory over its separate models' (dashed: 1x), on its first two
    rows of ratios."""
    for c in costs:
        y = first_rows[c.label]
        for offset, value, color, what in ((0, c.bytes_ratio, "#4c72b0", "bytes"),
                                           (1, c.memory_ratio, "#9fb8dd", "memory")):
            ax.barh(y + offset, value or 0, height=0.7, color=color)
            end = max(value or 0, c.bytes_target or 0) if what == "bytes" else value or 0
            ax.text(end, y + offset, f" {what} {value:.2f}x" if value is not None else
                    f" {what}: not measured", va="center", fontsize=12)
        if c.bytes_target is not None:
            ax.plot([c.bytes_target] * 2, [y - 0.38, y + 0.38], color="black", linewidth=3)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1.2)
    ax.set_xlim(0, max([1.0] + [v for c in costs for v in (c.bytes_ratio, c.memory_ratio)
                                if v is not None]) * 1.15)
    ax.tick_params(axis="y", left=False, labelleft=False)
    ax.set_title("bytes and memory\n/ the separate models'")
    ax.grid(axis="x", alpha=0.3)


def _legend(ax: Axes, groups: list[RatioGroup]) -> None:
    """A key for what the panels draw, and nothing they do not."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [r for g in groups for r in g.rows]
    handles = [Line2D([], [], marker="o", linestyle="", color=color, markersize=8,
                      label=f"reads {word}") for word, color in READING_COLOR.items()
               if any(r.reads == word for r in rows)]
    handles.append(Patch(color="#dcdcdc", label=f"level: 1.00 ± {LEVEL_BAND:.0%}"))
    if any(r.target is not None for r in rows):
        handles.append(Line2D([], [], color="black", linewidth=3, label="target"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=3,
              frameon=False)


def has_pairs(bench: BenchFile) -> bool:
    return any(p.ratio is not None and p.interval and p.kind in KIND_LABEL for p in bench.pairs)
