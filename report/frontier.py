"""The deployment frontier: accuracy against cost for every configuration of a study.

Joins a host bench file (bundles named after the study's configurations, e.g.
`bundles/pals-top-1`) with a study's accuracy table (`palkit study-results`) and names the
configuration to ship for all tasks on every input (the lowest all-tasks p50) and for one task at
a time (the lowest one-task p50 on the faster runtime), among those within WITHIN_POINTS of
all-layer PALs. Latencies within LATENCY_TIE of the fastest tie (this shared host's bench runs
move by about that much), broken by the fewer bundle bytes.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from palkit.bench.schema import p50_id
from palkit.report.headline import REF_SEQ, REF_THREADS, task_p50
from palkit.report.ingest import Measurements, ReportError, host_subjects
from palkit.runtime.manifest import RUNTIMES
from palkit.trainer.checkpoint import read_json

ALL_LAYERS = "pals-annealed"     # the study's all-layer PAL configuration, the reference
SEPARATE = "separate"
WITHIN_POINTS = 1.0
LATENCY_TIE = 0.05


# Three separate models: our own bundles when benched, else the plain int8 classifiers built
# from the same --mode separate run (the same models, without palkit's bundle format).
PLAIN_PEERS = {"executorch": "peer/et-int8", "onnxruntime": "peer/ort-int8"}


def _subject(subs: dict[str, dict[str, Any]], name: str, runtime: str) -> str | None:
    candidates = [f"{name}/{runtime}", f"{name}/{runtime}/int8"]
    if name == SEPARATE:
        candidates.append(PLAIN_PEERS[runtime])
    return next((c for c in candidates if c in subs), None)


def frontier_points(data: dict[str, Any], prefix: str, m: Measurements,
                    rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """One point per configuration that has both an accuracy row and a benched bundle."""
    subs = host_subjects(data)
    split = "test" if all(r.get("test_avg") for r in rows) else "dev"  # the split every row has
    points = []
    for row in rows:
        name = row["name"]
        found = {rt: _subject(subs, name, rt) for rt in RUNTIMES}
        if not any(found.values()):
            continue
        point: dict[str, Any] = {"name": name, "accuracy": row[f"{split}_avg"]["mean"],
                                 "accuracy_sd": row[f"{split}_avg"]["sd"], "split": split,
                                 "one_task_ms": {}, "sources": []}
        for rt, subject in found.items():
            if subject is None:
                continue
            s = subs[subject]
            one, ids = task_p50(m, prefix, subject, s["tasks"], REF_THREADS, REF_SEQ)
            point["one_task_ms"][rt] = one
            point["sources"] += ids
            if rt != "executorch":  # bytes and all tasks: the ExecuTorch bundle's
                continue
            bundle = s["bundle"]
            task_bytes = (bundle["total_bytes"] if s.get("role") in ("separate", "peer")
                          else sum(bundle.get("adapter_bytes", {}).values()))
            mid = p50_id(prefix, subject, "all_tasks", REF_THREADS, REF_SEQ)
            all_tasks, sources = m.get(mid), [mid]
            if all_tasks is None and one is not None:  # not measured: the tasks one by one
                all_tasks, sources = one * len(s["tasks"]), ids
            point["sources"] += sources
            point.update(bundle_bytes=bundle["total_bytes"], task_specific_bytes=task_bytes,
                         all_tasks_ms=all_tasks,
                         all_tasks_ratio=all_tasks / one if all_tasks and one else None)
        points.append(point)
    return points, split


def _fastest_then_smallest(points: list[dict[str, Any]], latency) -> str:
    """The fastest point, or among those within LATENCY_TIE of it the one with fewest bytes."""
    best = min(latency(p) for p in points)
    tied = [p for p in points if latency(p) <= best * (1 + LATENCY_TIE)]
    return min(tied, key=lambda p: (p.get("bundle_bytes") or float("inf"), latency(p)))["name"]


def recommend(points: list[dict[str, Any]], split: str) -> dict[str, Any]:
    """The configurations to ship, and the summary keys of the best PAL placement."""
    by_name = {p["name"]: p for p in points}
    out: dict[str, Any] = {"all_tasks": None, "one_task": None, "best_placement": None,
                           "all_tasks_ratio_best_placement": None,
                           "best_placement_accuracy_gap": None, "notes": []}
    reference = by_name.get(ALL_LAYERS)
    if reference is None:
        out["notes"].append(f"no '{ALL_LAYERS}' bundle benched: nothing to compare against")
        return out
    floor = reference["accuracy"] - WITHIN_POINTS
    eligible = [p for p in points if p["accuracy"] >= floor]
    timed = [p for p in eligible if p.get("all_tasks_ms") is not None]
    if timed:
        out["all_tasks"] = _fastest_then_smallest(timed, lambda p: p["all_tasks_ms"])
    out["one_task"] = _fastest_then_smallest(eligible, lambda p: min(
        (v for v in p["one_task_ms"].values() if v is not None), default=float("inf")))
    placements = [p for p in timed if p["name"].startswith("pals-")]
    if placements:
        best = min(placements, key=lambda p: p["all_tasks_ratio"] or float("inf"))
        out["best_placement"] = best["name"]
        out["all_tasks_ratio_best_placement"] = best["all_tasks_ratio"]
        out["best_placement_accuracy_gap"] = round(best["accuracy"] - reference["accuracy"], 2)
    out["notes"].append(
        f"accuracy: {split} average in points (mean over the study's seeds); eligible: within "
        f"{WITHIN_POINTS} point of {ALL_LAYERS} ({reference['accuracy']:.1f}); latency p50 at "
        f"{REF_SEQ} tokens, {REF_THREADS} thread; latencies within {LATENCY_TIE:.0%} of the "
        "fastest are a tie, won by the fewer bundle bytes")
    return out


def frontier(data: dict[str, Any], prefix: str, m: Measurements,
             accuracy_file: Path) -> dict[str, Any]:
    rows = read_json(accuracy_file)["rows"]
    points, split = frontier_points(data, prefix, m, rows)
    sds = [r["dev_avg"]["sd"] for r in rows if r["dev_avg"]["sd"] is not None]
    return {"accuracy_file": str(accuracy_file), "points": points,
            "recommendation": recommend(points, split),
            "accuracy_sd_points": statistics.fmean(sds) if sds else None}


# ---- how to add a task later --------------------------------------------------------------------



def adapter_summary(adapter: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One adapter's rows of the study: mean change against joint training per left-out task,
    the tasks within WITHIN_POINTS, its bytes, and the added task's change against its own."""
    left_out: dict[str, list[float]] = {}
    for r in rows:
        if r.get("vs_joint") is not None:
            left_out.setdefault(r["task"], []).append(r["vs_joint"])
    vs_joint = {t: round(statistics.fmean(v), 2) for t, v in sorted(left_out.items())}
    later = [r["vs_separate"] for r in rows if r.get("vs_joint") is None]
    return {"adapter": adapter, "vs_joint": vs_joint,
            "within": sorted(t for t, d in vs_joint.items() if d >= -WITHIN_POINTS),
            "adapter_bytes": round(statistics.fmean(r["adapter_bytes"] for r in rows)),
            "share_of_trunk": round(statistics.fmean(r["adapter_share_of_trunk"] for r in rows), 4),
            "later_vs_separate": round(statistics.fmean(later), 2) if later else None}


def add_task_recommendation(path: Path | None) -> dict[str, Any]:
    """How to add a task to the shipped trunk, from the leave-one-out study: the cheapest adapter
    within WITHIN_POINTS of joint training on every left-out task, and each adapter's means."""
    out: dict[str, Any] = {"file": str(path) if path else None, "adapter": None, "adapters": [],
                           "notes": []}
    if path is None:
        out["notes"].append("how to add a task: not measured (give --later-tasks FILE, a "
                            "leave-one-out study such as results/later-tasks.json in palkit's "
                            "repository)")
        return out
    if not Path(path).is_file():
        raise ReportError(f"{path}: no such file (--later-tasks: a leave-one-out study's JSON)")
    by_adapter: dict[str, list[dict[str, Any]]] = {}
    for r in read_json(path)["rows"]:
        by_adapter.setdefault(r["adapter"], []).append(r)
    out["adapters"] = sorted((adapter_summary(a, group) for a, group in by_adapter.items()),
                             key=lambda a: a["adapter_bytes"])
    # the study writes its rows as they finish: judge each adapter on every left-out task so far
    left_out = sorted({t for a in out["adapters"] for t in a["vs_joint"]})
    out["left_out_tasks"] = left_out
    eligible = [a for a in out["adapters"] if left_out and a["within"] == left_out]
    if eligible:
        best = eligible[0]
        out["adapter"] = best["adapter"]
        worst = min(best["vs_joint"].values())
        # the study's adapter name (head, pal-top-1, pal-all) as add-task's options
        flags = ("--adapter head" if best["adapter"] == "head" else
                 f"--adapter pal --pal-layers {best['adapter'].removeprefix('pal-')}")
        out["notes"].append(
            f"how to add a task: {best['adapter']}, `palkit add-task RUN --task T "
            f"{flags}` (the cheapest within "
            f"{WITHIN_POINTS} point of joint training for every left-out task, "
            f"{', '.join(left_out)}: worst "
            f"{worst:+.2f}; {best['adapter_bytes']:,} bytes, {100 * best['share_of_trunk']:.2f}% "
            f"of the trunk" + (f"; on the task added to all three, {best['later_vs_separate']:+.2f}"
                               " against its separate model" if best["later_vs_separate"]
                               is not None else "") + ")")
    else:
        closest = max(out["adapters"], key=lambda a: min(a["vs_joint"].values(), default=-1e9),
                      default=None)
        out["notes"].append(
            f"how to add a task: no adapter is within {WITHIN_POINTS} point of joint training "
            "for every left-out task" + (f"; closest: {closest['adapter']} ("
                                         + ", ".join(f"{t} {d:+.2f}" for t, d in
                                                     closest["vs_joint"].items()) + ")"
                                         if closest and closest["vs_joint"] else ""))
    out["notes"].append("adapters by bytes: " + "; ".join(
        f"{a['adapter']} {a['adapter_bytes']:,} B, within for {len(a['within'])}/"
        f"{len(left_out)} left-out tasks" + ("" if len(a["vs_joint"]) == len(left_out) else
                                            f" ({len(a['vs_joint'])} run so far)")
        for a in out["adapters"]))
    return out
