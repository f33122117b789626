"""The verdict on what palkit recommends, against the three separate models it replaces.

The recommended bundle is the shared trunk for the launch tasks (a head each on one trunk) with
a task added later as its own top-1 PALs; the report finds it as the multi-task bundle without
PALs in its trunk, int8, on ExecuTorch (the phone's runtime) where benched. Its latency ratios
come from paired timing (bench/pairs.py), each with its 95% interval and the word the interval
allows; its accuracy gap from the bench's test predictions, with a paired-bootstrap interval over
the test examples, beside both training budgets. The run's calibration pairs (A/A, identical
compute) say whether the machine was steady enough to trust it.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from palkit.bench.pairs import CALIBRATION, calibration_problem, t_975, wording
from palkit.bench.schema import measurement_id
from palkit.report.ingest import Measurements, host_subjects, placement
from palkit.trainer.tasks import BUILTIN_TASKS

RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95


def recommended_subject(subs: dict[str, dict[str, Any]]) -> str | None:
    """The multi-task bundle with no PALs in its trunk, int8 and ExecuTorch first."""
    found = [n for n, s in subs.items() if s.get("role") == "pal" and placement(s) == "none"
             and len(s.get("tasks", [])) > 1]
    found.sort(key=lambda n: (subs[n].get("precision") != "int8",
                              subs[n].get("runtime") != "executorch"))
    return found[0] if found else None


def separate_for(subs: dict[str, dict[str, Any]], name: str) -> str | None:
    """The separate models on the bundle's runtime and precision."""
    s = subs[name]
    return next((n for n, o in subs.items() if o.get("role") == "separate"
                 and o.get("runtime") == s.get("runtime")
                 and o.get("precision") == s.get("precision")), None)


def paired(data: dict[str, Any], kinds: tuple[str, ...], num: str) -> dict[str, Any] | None:
    """The bench's paired estimate of the first pair of `kinds` whose numerator is `num`, as the
    report quotes it: ratio, interval, what the interval allows saying, the pair's id."""
    for p in data.get("pairs") or []:
        if p["kind"] in kinds and p["num"]["subject"] == num and "ratio" in p:
            return {"ratio": p["ratio"], "interval": p["interval"],
                    "reads": wording(p["interval"]), "pairs": p["pairs"], "what": p["what"],
                    "source": p["id"]}
    return None


def pair_label(p: dict[str, Any]) -> str:
    """What a paired ratio compares, naming its subject (bench files before 2026-11-28 16:20 UTC
    wrote an A/A pair's without it)."""
    return p["what"] if p["num"]["subject"] in p["what"] else f"{p['what']}: {p['num']['subject']}"


def calibration(data: dict[str, Any]) -> dict[str, Any]:
    """The run's A/A and identical-compute pairs; noisy when either misreads 1.00."""
    checks, why = [], []
    for p in data.get("pairs") or []:
        if p["kind"] not in CALIBRATION or "ratio" not in p:
            continue
        problem = calibration_problem(p)
        what = pair_label(p)
        checks.append({"kind": p["kind"], "what": what, "ratio": p["ratio"],
                       "interval": p["interval"], "problem": problem, "source": p["id"]})
        if problem:
            why.append(f"{what}: {problem}")
    kinds = {c["kind"] for c in checks}
    # A pair the bench could not form (no head-only bundle beside its separate models) leaves
    # the run uncalibrated on it, which is not the same as noisy.
    missing = [k for k in CALIBRATION if k not in kinds]
    return {"pairs": checks, "noisy": bool(why), "why": why, "not_measured": missing}


def _task_scores(examples: dict[str, Any], tasks: list[str], idx: dict[str, np.ndarray]
                 ) -> np.ndarray:
    """The trainer's average (accuracies, (Pearson + 1) / 2) in points, per bootstrap row."""
    per_task = []
    for t in tasks:
        pred = np.asarray(examples[t]["pred"])[idx[t]]
        gold = np.asarray(examples[t]["gold"])[idx[t]]
        if BUILTIN_TASKS[t].is_regression:
            p, g = pred - pred.mean(1, keepdims=True), gold - gold.mean(1, keepdims=True)
            r = (p * g).sum(1) / np.sqrt((p * p).sum(1) * (g * g).sum(1))
            per_task.append((r + 1) / 2)
        else:
            per_task.append((pred == gold).mean(1))
    return 100 * np.mean(per_task, axis=0)


def paired_gap(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """a's average minus b's in points on the tasks both scored on the same examples, with the
    paired bootstrap's 95% interval (examples resampled within each task, the same for both)."""
    tasks = [t for t in a if t in b and t in BUILTIN_TASKS and a[t]["gold"] == b[t]["gold"]]
    if not tasks:
        return None
    rng = np.random.default_rng(SEED)
    idx = {t: rng.integers(0, len(a[t]["gold"]), (RESAMPLES, len(a[t]["gold"]))) for t in tasks}
    whole = {t: np.arange(len(a[t]["gold"]))[None] for t in tasks}
    gaps = _task_scores(a, tasks, idx) - _task_scores(b, tasks, idx)
    tail = (1 - CONFIDENCE) / 2 * 100
    return {"gap": float((_task_scores(a, tasks, whole) - _task_scores(b, tasks, whole))[0]),
            "interval": [float(np.percentile(gaps, tail)), float(np.percentile(gaps, 100 - tail))],
            "tasks": tasks, "examples": sum(len(a[t]["gold"]) for t in tasks)}


def _budget(accuracy: dict[str, Any], model_dirs: Any) -> int | None:
    """Optimizer steps of the --run whose folder holds these model folders (all its tasks)."""
    for entry in accuracy.values():
        if isinstance(entry, dict) and entry.get("run"):
            run = Path(entry["run"]).resolve()
            if any(Path(d).resolve().is_relative_to(run) for d in model_dirs):
                return entry.get("optimizer_steps")
    return None


def _accuracy(data: dict[str, Any], bundle: str, separate: str,
              study: dict[str, Any] | None) -> dict[str, Any] | None:
    """The bundle's gap to the separate models, both as their runtime runs them, the training
    budget of each side (from their --run entries), and the study's gap at equal compute."""
    accuracy, subs = data.get("accuracy") or {}, host_subjects(data)
    split = "test" if "test" in accuracy.get(bundle, {}) else "dev"
    mine, theirs = (accuracy.get(n, {}).get(split) or {} for n in (bundle, separate))
    gap = paired_gap(mine.get("examples") or {}, theirs.get("examples") or {})
    if gap is None:
        return None
    budgets = {side: _budget(accuracy, subs[n].get("fp32_model_dirs", {}).values())
               for side, n in (("joint", bundle), ("separate", separate))}
    out = {"split": split, **gap, "budgets": budgets}
    if study:
        out["equal_compute"] = study
    return out


def equal_compute(study_rows: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The study's shared trunk against its separate models at equal training compute (the
    converged study: 7,200 joint steps against 3 x 2,400), test averages over seeds."""
    rows = {r["name"]: r for r in study_rows or []}

    def test_avg(*names: str) -> dict[str, Any] | None:
        for n in names:
            if rows.get(n, {}).get("test_avg"):
                return {**rows[n]["test_avg"], "configuration": n}
        return None
    shared, separate = test_avg("shared", "shared, captured"), \
        test_avg("separate", "separate, captured")
    if not shared or not separate:
        return None
    out = {"shared": shared, "separate": separate, "gap": shared["mean"] - separate["mean"]}
    if min(shared["n"], separate["n"]) > 1 and shared["sd"] is not None \
            and separate["sd"] is not None:
        # Welch's interval over the seeds: each side's seed-to-seed spread, its own variance
        va, vb = shared["sd"] ** 2 / shared["n"], separate["sd"] ** 2 / separate["n"]
        df = (va + vb) ** 2 / (va ** 2 / (shared["n"] - 1) + vb ** 2 / (separate["n"] - 1))
        half = t_975(df) * math.sqrt(va + vb)
        out["interval"] = [out["gap"] - half, out["gap"] + half]
    return out


def recommended(data: dict[str, Any], prefix: str, m: Measurements,
                study_rows: list[dict[str, Any]] | None = None
                ) -> tuple[dict[str, Any] | None, list[str]]:
    """The recommended bundle against the separate models, or None and why."""
    subs = host_subjects(data)
    name = recommended_subject(subs)
    if name is None:
        return None, ["recommended configuration: no multi-task bundle without PALs in its "
                      "trunk was benched (`palkit train --mode shared`, export it, bench it)"]
    sep = separate_for(subs, name)
    if sep is None:
        return None, [f"recommended configuration: no separate models on {subs[name]['runtime']} "
                      f"were benched beside {name} (add bundles/separate/*)"]
    adapters = subs[name].get("task_adapters") or {}

    def m_ratio(a: str, b: str) -> float | None:
        x, y = m.get(a), m.get(b)
        return x / y if x is not None and y else None

    memory = measurement_id(prefix, "memory", name, "model_all_tasks_program")
    if m.get(memory) is None:
        memory = measurement_id(prefix, "memory", name, "model_all_tasks")
    out = {"bundle": name, "versus": sep, "runtime": subs[name]["runtime"],
           "tasks": list(subs[name]["tasks"]),
           "added_later": sorted(t for t, a in adapters.items() if a.get("kind") == "pal"),
           "size_ratio": m_ratio(measurement_id(prefix, "size", name, "total_bytes"),
                                 measurement_id(prefix, "size", sep, "total_bytes")),
           "one_task": paired(data, ("identical_compute", "one_task"), name),
           "all_tasks": paired(data, ("all_tasks",), name),
           "all_tasks_vs_one": paired(data, ("all_vs_one",), name),
           "memory_ratio": m_ratio(memory, measurement_id(prefix, "memory", sep,
                                                          "model_all_tasks")),
           "swap_ms": m.get(measurement_id(prefix, "swap_ms", name)),
           "accuracy": _accuracy(data, name, sep, equal_compute(study_rows))}
    notes = [f"recommended configuration: {k} not measured" for k, v in out.items() if v is None]
    return out, notes


def _times(estimate: dict[str, Any] | None) -> tuple[str, str]:
    if estimate is None:
        return "–", "not measured"
    low, high = estimate["interval"]
    return f"{estimate['ratio']:.2f}x [{low:.2f}, {high:.2f}]", estimate["reads"]


def verdict_rows(rec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, value, what it reads) for each line of the recommended configuration's verdict;
    a time below 1x: the bundle is faster."""
    rows = [("bytes, all its tasks / the separate models",
             "–" if rec["size_ratio"] is None else f"{rec['size_ratio']:.2f}x", "")]
    for key, what in (("one_task", "one task / its separate model (identical compute)"),
                      ("all_tasks", "all tasks on one input / the separate models in turn"),
                      ("all_tasks_vs_one", "all tasks on one input / one task")):
        rows.append((what, *_times(rec[key])))
    rows.append(("memory, all tasks resident / the separate models'",
                 "–" if rec["memory_ratio"] is None else f"{rec['memory_ratio']:.2f}x", ""))
    rows.append(("adapter swap", "–" if rec["swap_ms"] is None else f"{rec['swap_ms']:.3g} ms",
                 ""))
    acc = rec["accuracy"]
    if acc is None:
        rows.append(("accuracy gap", "–", "not measured (bench with --splits test)"))
        return rows
    low, high = acc["interval"]
    budgets = acc["budgets"]
    steps = ("budgets unknown" if None in budgets.values() else
             f"{budgets['joint']:,} optimizer steps against {budgets['separate']:,}"
             + (": unequal" if budgets["joint"] != budgets["separate"] else ": equal"))
    rows.append((f"accuracy gap, {acc['split']} ({', '.join(acc['tasks'])}; "
                 f"{acc['examples']:,} examples), points",
                 f"{acc['gap']:+.1f} [{low:+.1f}, {high:+.1f}]", steps))
    equal = acc.get("equal_compute")
    if equal:
        interval = (f" [{equal['interval'][0]:+.1f}, {equal['interval'][1]:+.1f}]"
                    if "interval" in equal else "")
        rows.append(("accuracy gap at equal compute (the converged study), test points",
                     f"{equal['gap']:+.1f}{interval}", f"{_seeds(equal['shared'])} against "
                     f"{_seeds(equal['separate'])}; Welch's interval over seeds"))
    return rows


def _seeds(avg: dict[str, Any]) -> str:
    sd = f" ± {avg['sd']:.1f}" if avg.get("sd") is not None else ""
    return f"{avg['mean']:.1f}{sd} ({avg['n']} seed{'s' if avg['n'] != 1 else ''})"


def calibration_rows(cal: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, ratio [interval], steady or why not) per calibration pair."""
    return [(c["what"], _times({**c, "reads": ""})[0], c["problem"] or "steady")
            for c in cal["pairs"]]
