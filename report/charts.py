"""The report's figures, each small enough to take in at once (at most 1600 x 1000 px).

headline.png, accuracy_vs_size.png and (with `report --accuracy`) frontier.png, captioned in
markdown.py's FIGURE_CAPTIONS; all from the first host file, as the headline is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palkit.bench.schema import measurement_id, p50_id
from palkit.report.frontier import ALL_LAYERS, WITHIN_POINTS
from palkit.report.headline import (TARGETS, Headline, accuracy_split, pal_groups, plain_subjects,
                                    reference_condition, size_reference, total_bytes)
from palkit.report.ingest import BenchInput, Measurements, MiB, machine_label
from palkit.ui.plots import pyplot, save

ROLE_COLOR = {"pal": "#c44e52", "native": "#dd8452", "separate": "#4c72b0", "peer": "#8c8c8c"}
ROLE_LEGEND = {"pal": "PAL bundle (one trunk, all tasks)",
               "native": "PAL bundle, the app's C++ path", "separate": "separate models (ours)",
               "peer": "peer: separate models"}
ROLE_ORDER = ("pal", "native", "separate", "peer")
RUNTIME_MARKER = {"executorch": ("o", "ExecuTorch"), "onnxruntime": ("s", "ONNX Runtime"),
                  "torch": ("D", "PyTorch")}
STYLE = {"font.size": 14, "axes.titlesize": 15, "axes.labelsize": 14, "legend.fontsize": 13,
         "xtick.labelsize": 13, "ytick.labelsize": 14}


def write_charts(hosts: list[BenchInput], m: Measurements, out: Path,
                 deployment: dict[str, Any] | None = None) -> dict[str, str]:
    """The figures written into `out`: name -> file name (none without a host file)."""
    if not hosts:
        return {}
    prefix, data, _ = hosts[0]
    plt = pyplot()
    charts = {}
    with plt.rc_context(STYLE):
        rows = headline_rows(data, prefix, m)
        if rows:
            save(draw_headline(rows, data), out / "headline.png")
            charts["headline"] = "headline.png"
        points, lines = accuracy_points(data, prefix, m)
        if points:
            save(draw_accuracy(points, lines, data), out / "accuracy_vs_size.png")
            charts["accuracy_vs_size"] = "accuracy_vs_size.png"
        timed = [p for p in (deployment or {}).get("points", []) if p.get("all_tasks_ms")]
        if timed:
            frontier_figure(timed, deployment["recommendation"], data, out / "frontier.png")
            charts["frontier"] = "frontier.png"
    return charts


# ---- headline figure ---------------------------------------------------------------------------

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


def headline_rows(data: dict[str, Any], prefix: str, m: Measurements) -> list[Row]:
    threads, seq = reference_condition(data)
    h = Headline(data, prefix, m, threads, seq)
    all_layer, top_half = pal_groups(h.subs)
    all_bound = {n: TARGETS["all_tasks_ratio_all_layers"][1] for n in all_layer}
    all_bound.update({n: TARGETS["all_tasks_ratio_top_half"][1] for n in top_half})
    rows = []
    by_role = sorted(h.subs.items(), key=lambda kv: ROLE_ORDER.index(kv[1].get("role", "peer")))
    for name, s in by_role:
        one = h.task_p50(name)[0]
        all_id = p50_id(prefix, name, "all_tasks", threads, seq)
        row = Row(s.get("label", name), s.get("role", "peer"), _mib(total_bytes(m, prefix, name)),
                  one, m.get(all_id), (m.items.get(all_id) or {}).get("all_tasks_mode") == "program")
        if row.role == "pal":
            ref = size_reference(h.subs, name)
            row.size_target = _times(TARGETS["size_ratio_vs_three_separate"][1],
                                     _mib(total_bytes(m, prefix, ref)) if ref else None)
            plain = plain_subjects(h.subs, name)
            row.one_target = _times(TARGETS["latency_ratio_pal_vs_plain"][1],
                                    h.task_p50(plain[0])[0] if plain else None)
            row.all_target = _times(all_bound.get(name), one)
        if row.mib is not None or row.one_ms is not None:
            rows.append(row)
    return rows


def _mib(v: float | None) -> float | None:
    return None if v is None else v / MiB


def _times(bound: float | None, v: float | None) -> float | None:
    return bound * v if bound is not None and v is not None else None


def draw_headline(rows: list[Row], data: dict[str, Any]):
    plt = pyplot()
    threads, seq = reference_condition(data)
    # at most 16 x 10 inches: 1600 x 1000 px, one screen; more rows get thinner bars
    fig, axes = plt.subplots(1, 3, figsize=(16, min(10.0, 3.2 + 0.55 * len(rows))), sharey=True)
    peers = [r.one_ms for r in rows if r.role == "peer" and r.one_ms is not None]
    peer_target = min(peers) * TARGETS["latency_ratio_pal_vs_best_peer"][1] if peers else None
    _panel(axes[0], rows, [r.mib for r in rows], [r.size_target for r in rows],
           "bundle size, all tasks", "MiB on disk", "{:.1f}")
    _panel(axes[1], rows, [r.one_ms for r in rows], [r.one_target for r in rows],
           "one task, p50", "ms", "{:.1f}", line=peer_target)
    all_text = [("" if a is None else f"{a:.0f} ({a / o:.2f}×)" if o else f"{a:.0f}")
                for a, o in ((r.all_ms, r.one_ms) for r in rows)]
    hatched = [not r.all_program and r.all_ms is not None for r in rows]
    _panel(axes[2], rows, [r.all_ms for r in rows], [r.all_target for r in rows],
           "all tasks on one input, p50", "ms (× one task)", "{:.0f}", all_text,
           hatched=hatched)
    targets = any(t is not None for r in rows
                  for t in (r.size_target, r.one_target, r.all_target))
    _headline_legend(fig, rows, targets, peer_target is not None, any(hatched))
    fig.suptitle(f"{machine_label(data['machine'])} · {seq} tokens, {threads} thread(s), batch 1",
                 fontsize=15)
    b = {k: v[1] for k, v in TARGETS.items()}
    fig.text(0.01, 0.01, f"targets: size ≤ {b['size_ratio_vs_three_separate']:.2f}× three "
             f"separate int8 models · one task ≤ {b['latency_ratio_pal_vs_plain']:.2f}× plain "
             "int8 classifier on the same runtime, and ≤ the fastest peer\n"
             f"all tasks ≤ {b['all_tasks_ratio_all_layers']}× one task (all-layer PALs), "
             f"≤ {b['all_tasks_ratio_top_half']}× one task (top-half PALs)",
             fontsize=12, color="#333333")
    fig.tight_layout(rect=(0, 0.07, 1, 0.885))
    for ax in axes:
        fit_labels(ax)
    return fig


def _panel(ax, rows: list[Row], values: list[float | None], targets: list[float | None],
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


def fit_labels(ax, pad_px: float = 6.0) -> None:
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


def _headline_legend(fig, rows: list[Row], targets: bool, peer_target: bool,
                     hatched: bool) -> None:
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


# ---- accuracy vs size --------------------------------------------------------------------------

def accuracy_points(data: dict[str, Any], prefix: str,
                    m: Measurements) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Bundle points (size, average, the run they came from, runtime) and fp32 reference lines."""
    split = accuracy_split(data)
    subs = data.get("subjects") or {}
    runs = {n: e["run"] for n, e in (data.get("accuracy") or {}).items()
            if n.startswith("fp32:") and isinstance(e, dict) and e.get("run")}
    points, lines = [], []
    for name in data.get("accuracy") or {}:
        v = m.get(measurement_id(prefix, "accuracy", name, split, "avg"))
        if v is None:
            continue
        if name in runs:
            lines.append({"family": Path(runs[name]).name, "acc": v,
                          "separate": data["accuracy"][name].get("kind") == "separate"})
            continue
        size = total_bytes(m, prefix, name)
        if name in subs and size is not None:
            points.append({"family": _family(subs[name], runs) or name.split("/")[0],
                           "runtime": subs[name].get("runtime"), "mib": size / MiB, "acc": v})
    return points, lines


def _family(subject: dict[str, Any], runs: dict[str, str]) -> str | None:
    """The name of the training run a subject's models came from."""
    dirs = [Path(d).resolve() for d in (subject.get("fp32_model_dirs") or {}).values()]
    return next((Path(run).name for run in runs.values()
                 if dirs and all(Path(run).resolve() in d.parents for d in dirs)), None)


# The y axis shows at least this many points either side of the data: a gap of a tenth of a
# point must look as small as it is, not fill the chart.
ACCURACY_PAD_POINTS = 1.0


def draw_accuracy(points: list[dict[str, Any]], lines: list[dict[str, Any]],
                  data: dict[str, Any]):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    plt = pyplot()
    split = accuracy_split(data)
    families = sorted({p["family"] for p in points} | {ln["family"] for ln in lines})
    color = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for p in points:
        marker = RUNTIME_MARKER.get(p["runtime"], ("o", p["runtime"]))[0]
        ax.scatter(p["mib"], p["acc"], s=110, marker=marker, color=color[p["family"]],
                   edgecolor="black", linewidth=0.6, zorder=3)
    right = max(p["mib"] for p in points) * 1.15
    for ln in lines:
        ax.axhline(ln["acc"], color=color[ln["family"]], linestyle="--", linewidth=1.5)
        ax.text(0, ln["acc"], f" fp32 {ln['acc']:.1f}", va="bottom",
                color=color[ln["family"]])
    separate = [ln["acc"] for ln in lines if ln["separate"]]
    gap = TARGETS["accuracy_gap_pal_int8_vs_separate_fp32"][1]
    if separate:
        bound = separate[0] + gap
        ax.axhline(bound, color="black", linestyle=":", linewidth=1.5)
        ax.text(0, bound, f" target {bound:.1f}", va="bottom")
    ax.set_xlim(0, right)
    shown = [p["acc"] for p in points] + [ln["acc"] for ln in lines] + \
        ([bound] if separate else [])
    pad = max(ACCURACY_PAD_POINTS, 0.08 * (max(shown) - min(shown)))
    ax.set_ylim(min(shown) - pad, max(shown) + pad)
    ax.set_xlabel("MiB on disk, all tasks (bundles as exported)")
    ax.set_ylabel(f"average score, {split} (points)")
    ax.set_title(f"accuracy vs size\n{machine_label(data['machine'])}")
    ax.grid(alpha=0.3)
    handles = [Patch(color=color[f], label=f) for f in families]
    handles += [Line2D([], [], marker=mk, linestyle="", markersize=10, color="white",
                       markeredgecolor="black", label=name)
                for rt, (mk, name) in RUNTIME_MARKER.items() if any(p["runtime"] == rt for p in points)]
    handles.append(Line2D([], [], color="#555555", linestyle="--", label="same run, fp32 in PyTorch"))
    if separate:
        handles.append(Line2D([], [], color="black", linestyle=":",
                              label=f"target: separate fp32 − {-gap:g} point"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


# ---- deployment frontier ------------------------------------------------------------------------

def frontier_figure(points: list[dict[str, Any]], rec: dict[str, Any], data: dict[str, Any],
                    path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 6.5))
    reference = next((p for p in points if p["name"] == ALL_LAYERS), None)
    if reference is not None:   # the configurations the recommendation may choose from
        floor = reference["accuracy"] - WITHIN_POINTS
        ax.axhspan(floor, reference["accuracy"] + 2 * WITHIN_POINTS, color="#55a868", alpha=0.08)
        ax.axhline(floor, color="#55a868", linestyle=":", linewidth=1.5)
        ax.text(1, floor, f" {WITHIN_POINTS:g} point below {ALL_LAYERS}", va="bottom",
                color="#3a7a48")
        ax.set_ylim(floor - WITHIN_POINTS / 2, reference["accuracy"] + 1.5 * WITHIN_POINTS)
    largest = max(p["task_specific_bytes"] for p in points)
    for p in points:
        area = 150 + 2500 * p["task_specific_bytes"] / largest
        color = ROLE_COLOR["separate"] if p["name"] == "separate" else ROLE_COLOR["pal"]
        ax.scatter(p["all_tasks_ms"], p["accuracy"], s=area, color=color, alpha=0.55,
                   edgecolor="black", linewidth=0.8, zorder=3)
        if p.get("accuracy_sd"):
            ax.errorbar(p["all_tasks_ms"], p["accuracy"], yerr=p["accuracy_sd"], color="black",
                        capsize=4, linewidth=1, zorder=4)
        picked = [use for use, key in (("all tasks", "all_tasks"), ("one task", "one_task"))
                  if rec.get(key) == p["name"]]
        label = p["name"] + (f"  ← ship ({', '.join(picked)})" if picked else "")
        # a large bubble is labelled beneath it, where a neighbour's bubble cannot sit
        radius = math.sqrt(area / math.pi)   # points: scatter's s is an area in points²
        big = radius > 15
        ax.annotate(label, (p["all_tasks_ms"], p["accuracy"]),
                    xytext=(0, -radius - 4) if big else (10, 6), textcoords="offset points",
                    ha="center" if big else "left", va="top" if big else "baseline",
                    fontsize=12, fontweight="bold" if picked else "normal")
    ax.set_xlim(0, max(p["all_tasks_ms"] for p in points) * 1.45)
    split = points[0]["split"]
    ax.set_xlabel("all three tasks on one input, ms (p50, 128 tokens, 1 thread, ExecuTorch int8)")
    ax.set_ylabel(f"average score, {split} (points; mean ± sd over seeds)")
    ax.set_title(f"deployment frontier · bubble area = task-specific bytes\n"
                 f"{machine_label(data['machine'])}", fontsize=14)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, path)
