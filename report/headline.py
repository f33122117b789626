"""The numbers the report derives from measurements: the headline against the targets, PAL
bundle / other ratios pair by pair, and the fraction of the machine's ceiling reached.

Every headline value names the measurement ids it was computed from ("sources"); the headline
uses the first host file only, at the reference condition (128 tokens, 1 thread, p50).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palkit.bench.schema import measurement_id, p50_id
from palkit.report.ingest import BenchInput, Measurements, host_subjects, machine_label, placement
from palkit.report.recommended import paired

REF_SEQ, REF_THREADS = 128, 1

# target: (comparison, bound, what) -- checked in the report, never asserted
TARGETS = {
    "size_ratio_vs_three_separate": ("<=", 0.40, "PAL int8, all three tasks, bytes / three separate int8 models"),
    "size_ratio_vs_one_separate": ("<=", 1.10, "PAL int8 bytes / one separate int8 model"),
    "latency_ratio_pal_vs_plain": ("<=", 1.05, "one all-layer PAL task p50 / plain no-PAL int8 classifier, same runtime"),
    "latency_ratio_pal_vs_best_peer": ("<=", 1.00, "one task p50 / fastest peer"),
    "all_tasks_ratio_all_layers": ("<=", 2.2, "all three tasks on one input / one task (all-layer PALs)"),
    "all_tasks_vs_flop_floor": ("<=", 1.05, "all-layer PALs' all tasks / one task, over its matrix-multiply FLOP floor"),
    "all_tasks_ratio_top_half": ("<=", 1.7, "all three tasks on one input / one task (top-half PALs)"),
    "all_tasks_ratio_best_placement": ("<=", 1.5, "all three tasks / one task, best PAL placement within 1 point of all-layer PALs"),
    "swap_ms": ("<=", 10.0, "adapter swap, ms"),
    "memory_ratio_all_vs_one": ("<=", 1.3, "memory with all three resident / one"),
    "accuracy_gap_pal_int8_vs_separate_fp32": (">=", -1.0, "PAL int8 avg - three separate fp32 avg, points"),
    "accuracy_drop_int8_vs_fp32": ("<=", 0.5, "fp32 avg - int8 avg of the same PAL model, points"),
}
# summary key whose value, when known, is said beside a target in the report
TARGET_CONTEXT = {"latency_ratio_pal_vs_plain": "flop_floor_pal_vs_plain",
                  "accuracy_gap_pal_int8_vs_separate_fp32": "training_steps"}
SUMMARY_KEYS = ("machine", "size_ratio_vs_three_separate", "size_ratio_vs_one_separate",
                "latency_ratio_pal_vs_plain", "latency_ratio_pal_vs_best_peer",
                "all_tasks_ratio_all_layers", "all_tasks_vs_flop_floor",
                "all_tasks_ratio_top_half", "swap_ms",
                "memory_ratio_all_vs_one", "accuracy_avg_pal_int8", "accuracy_avg_separate_fp32",
                "accuracy_drop_int8_vs_fp32", "all_tasks_ratio_best_placement",
                "best_placement_accuracy_gap", "flop_floor_pal_vs_plain", "training_steps",
                "intervals", "notes")


def total_bytes(m: Measurements, prefix: str, subject: str) -> float | None:
    """A subject's model files for all its tasks, in bytes."""
    return m.get(measurement_id(prefix, "size", subject, "total_bytes"))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def reference_condition(data: dict[str, Any]) -> tuple[int, int]:
    """(threads, seq_len) the headline compares at: 1 thread and 128 tokens where measured,
    else the fewest threads and the longest input."""
    rows = data["results"]
    threads = REF_THREADS if any(r["threads"] == REF_THREADS for r in rows) else \
        min((r["threads"] for r in rows), default=REF_THREADS)
    seq = REF_SEQ if any(r["seq_len"] == REF_SEQ for r in rows) else \
        max((r["seq_len"] for r in rows), default=REF_SEQ)
    return threads, seq


def task_p50(m: Measurements, prefix: str, subject: str, tasks: list[str], threads: int,
             seq: int) -> tuple[float | None, list[str]]:
    """Mean one-task p50 over the subject's tasks, and the ids it came from."""
    ids = [p50_id(prefix, subject, f"task:{t}", threads, seq) for t in tasks]
    vals = [m.get(i) for i in ids]
    return (statistics.fmean(vals) if vals and None not in vals else None), ids  # type: ignore


NOT_MEASURED = "not measured (the inputs lack what it needs)"
# What fills a headline key that no host bench file can measure alone
MISSING_INPUT = {
    "all_tasks_ratio_best_placement": "needs the accuracy of several PAL placements trained to "
    "one budget: `palkit report --accuracy FILE` with a study's table (`palkit study-results`, e.g. "
    "results/converged.json) and their bundles benchmarked",
    "best_placement_accuracy_gap": "needs `palkit report --accuracy FILE` (see "
    "all_tasks_ratio_best_placement)",
}


@dataclass
class Headline:
    """The headline of one host file as it is worked out: values, sources and notes."""
    data: dict[str, Any]
    prefix: str
    m: Measurements
    threads: int
    seq: int
    out: dict[str, Any] = field(default_factory=lambda: {k: None for k in SUMMARY_KEYS})
    src: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def subs(self) -> dict[str, dict[str, Any]]:
        return host_subjects(self.data)

    def pick(self, role: str) -> list[str]:
        return [n for n, s in self.subs.items() if s.get("role") == role]

    def task_p50(self, name: str) -> tuple[float | None, list[str]]:
        return task_p50(self.m, self.prefix, name, self.subs[name]["tasks"], self.threads, self.seq)

    def fastest(self, names: list[str]) -> tuple[str | None, float | None, list[str]]:
        timed = [(v, n, ids) for n in names for v, ids in [self.task_p50(n)] if v is not None]
        v, n, ids = min(timed, key=lambda t: t[0], default=(None, None, []))
        return n, v, ids

    def set(self, key: str, value: float | None, ids: list[str]) -> None:
        self.out[key], self.src[key] = value, ids

    def set_paired(self, key: str, kinds: tuple[str, ...], subject: str) -> None:
        """The ratio from the bench's paired timing of `subject`, with its interval, where the
        bench measured that pair (bench/pairs.py); else the p50 ratio set before stays."""
        estimate = paired(self.data, kinds, subject)
        if estimate is not None:
            self.set(key, estimate["ratio"], [estimate["source"]])
            self.out["intervals"] = {**(self.out["intervals"] or {}),
                                     key: estimate["interval"]}


def pal_groups(subs: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(all-layer PAL subjects, top-half PAL subjects), int8 preferred, each named from its
    layer indices: a bundle with PALs in fewer layers (top-1, 3,4,5) is neither."""
    pals = [n for n, s in subs.items() if s.get("role") == "pal"]
    pals = [n for n in pals if subs[n].get("precision") == "int8"] or pals
    all_layer = [n for n in pals if placement(subs[n]) == "all"]
    # The paper's PAL has the trunk's head count; a fewer-heads variant (--pal-heads) is a
    # frontier point, not the headline's all-layer PALs.
    most = max((subs[n].get("pal_heads") or 0 for n in all_layer), default=0)
    all_layer = [n for n in all_layer if (subs[n].get("pal_heads") or 0) == most]
    return all_layer, [n for n in pals if placement(subs[n]) == "top"]


def headline_pal(data: dict[str, Any], prefix: str, m: Measurements) -> str | None:
    """The PAL subject the headline speaks for: the fastest all-layer PAL bundle."""
    h = Headline(data, prefix, m, *reference_condition(data))
    return h.fastest(pal_groups(h.subs)[0])[0]


def headline(data: dict[str, Any], prefix: str, m: Measurements) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary values, and for each the measurement ids it came from."""
    threads, seq = reference_condition(data)
    h = Headline(data, prefix, m, threads, seq)
    h.out["machine"] = machine_label(data["machine"])
    h.notes.append(f"latency ratios at {seq} tokens, {threads} thread(s), p50, mean over tasks; "
                   "every other condition is in report.md")
    all_layer, top_half = pal_groups(h.subs)
    pal, pal_p50, pal_ids = h.fastest(all_layer)
    if pal is None:
        others = [f"{n} (placement {placement(h.subs[n])})" for n in h.pick("pal")]
        h.notes.append("no all-layer PAL bundle with latency results: latency, size, swap and "
                       "memory headlines are null" + (f"; benchmarked: {', '.join(others)}"
                                                      if others else ""))
    else:
        h.notes.append(f"PAL subject: {pal} (placement {placement(h.subs[pal])}; the "
                       "fastest all-layer PAL runtime at the reference condition)")
        _latency_ratios(h, pal, pal_p50, pal_ids)
        _size_ratios(h, pal)
        _swap_and_memory(h, pal)
    for key, names in (("all_tasks_ratio_all_layers", all_layer),
                       ("all_tasks_ratio_top_half", top_half)):
        _all_tasks_ratio(h, key, names)
    _accuracy(h, pal)
    for key in SUMMARY_KEYS:
        if (key not in ("machine", "notes", "intervals", *TARGET_CONTEXT.values())
                and h.out[key] is None
                and not any(n.startswith(f"{key}:") for n in h.notes)):
            why = MISSING_INPUT.get(key, NOT_MEASURED)
            h.notes.append(f"{key}: {why}")
    h.notes.append(f"accuracy in points (0-100, the trainer's average: accuracies and "
                   f"(Pearson+1)/2) on the {accuracy_split(data)} split")
    h.out["notes"] = h.notes
    return h.out, h.src


def plain_subjects(subs: dict[str, dict[str, Any]], pal: str) -> list[str]:
    """Our own no-PAL separate bundles on the PAL subject's runtime and precision."""
    s = subs[pal]
    return [n for n, o in subs.items() if o.get("role") == "separate"
            and o.get("runtime") == s["runtime"] and o.get("precision") == s["precision"]]


def _latency_ratios(h: Headline, pal: str, pal_p50: float | None, pal_ids: list[str]) -> None:
    s = h.subs[pal]
    plain = plain_subjects(h.subs, pal)
    if plain:
        v, ids = h.task_p50(plain[0])
        h.set("latency_ratio_pal_vs_plain", ratio(pal_p50, v), pal_ids + ids)
        h.set_paired("latency_ratio_pal_vs_plain", ("one_task",), pal)
        floor = ratio(_one_task_flops(h, pal), _one_task_flops(h, plain[0]))
        h.set("flop_floor_pal_vs_plain", floor, pal_ids + ids)  # the rows carry their FLOPs
        if floor is not None:
            h.notes.append(f"latency_ratio_pal_vs_plain: one PAL task takes {floor:.3f}x the "
                           "plain classifier's matrix-multiply FLOPs, the floor of this ratio "
                           "when inference is compute-bound")
    else:
        h.notes.append(f"latency_ratio_pal_vs_plain: no separate {s['precision']} bundles on "
                       f"{s['runtime']} were benchmarked (export runs/separate and pass them)")
    peer, peer_p50, peer_ids = h.fastest(h.pick("peer"))
    if peer:
        h.set("latency_ratio_pal_vs_best_peer", ratio(pal_p50, peer_p50), pal_ids + peer_ids)
        h.set_paired("latency_ratio_pal_vs_best_peer", ("peer",), pal)
        h.notes.append(f"fastest peer: {peer}")
    else:
        h.notes.append("latency_ratio_pal_vs_best_peer: no peers measured (pass --run runs/separate)")


def _one_task_flops(h: Headline, name: str) -> float | None:
    flops = [r.get("matmul_flops") for r in h.data["results"] if r.get("subject") == name
             and r["config"].startswith("task:") and r["threads"] == h.threads
             and r["seq_len"] == h.seq]
    return statistics.fmean(flops) if flops and all(flops) else None


def size_reference(subs: dict[str, dict[str, Any]], pal: str) -> str | None:
    """Three separate int8 models on the PAL subject's runtime: our bundles, else the peer."""
    ref = plain_subjects(subs, pal) or [n for n, o in subs.items() if o.get("role") == "peer"
                                        and o.get("runtime") == subs[pal]["runtime"]
                                        and o.get("precision") == "int8"]
    return ref[0] if ref else None


def _size_ratios(h: Headline, pal: str) -> None:
    r = size_reference(h.subs, pal)
    if r is None:
        h.notes.append(f"size ratios: no separate int8 models on {h.subs[pal]['runtime']} were measured")
        return
    total_id = measurement_id(h.prefix, "size", pal, "total_bytes")
    three_id = measurement_id(h.prefix, "size", r, "total_bytes")
    per = [i for i in h.m.items if i.startswith(measurement_id(h.prefix, "size", r, "model", ""))]
    h.set("size_ratio_vs_three_separate", ratio(h.m.get(total_id), h.m.get(three_id)),
          [total_id, three_id])
    if per:
        one = statistics.fmean(h.m.get(i) for i in per)  # type: ignore[misc]
        h.set("size_ratio_vs_one_separate", ratio(h.m.get(total_id), one), [total_id, *per])
    h.notes.append(f"size reference: {r}")


def all_tasks_subject(h: Headline, names: list[str]) -> str | None:
    """A runtime with an all-tasks program is how a user runs every task; without one the
    tasks run one after the other."""
    cand = [n for n in names if h.subs[n].get("all_tasks_program")] or names
    return (h.fastest(cand)[0] or cand[0]) if cand else None


def _all_tasks_ratio(h: Headline, key: str, names: list[str]) -> None:
    n = all_tasks_subject(h, names)
    if n is None:
        layers, out = ("top", "runs/pals-top") if "top" in key else ("all", "runs/default")
        h.notes.append(f"{key}: no {'top-half' if 'top' in key else 'all-layer'} PAL bundle "
                       f"was benchmarked; train one (`palkit train --pal-layers {layers} --out "
                       f"{out}`), export it and bench it with the others")
        return
    h.notes.append(f"{key}: subject {n}")
    one, one_ids = h.task_p50(n)
    all_id = p50_id(h.prefix, n, "all_tasks", h.threads, h.seq)
    h.set(key, ratio(h.m.get(all_id), one), [all_id, *one_ids])
    h.set_paired(key, ("all_vs_one",), n)
    flops = {r["config"]: r.get("matmul_flops") for r in h.data["results"]
             if r.get("subject") == n and r["threads"] == h.threads and r["seq_len"] == h.seq}
    one_flops = [flops.get(f"task:{t}") for t in h.subs[n]["tasks"]]
    if flops.get("all_tasks") and all(one_flops):
        floor = flops["all_tasks"] / statistics.fmean(one_flops)
        h.notes.append(f"{key}: all tasks take {floor:.2f}x one task's matrix-multiply FLOPs, "
                       "the floor of this ratio when inference is compute-bound")
        if key == "all_tasks_ratio_all_layers":
            h.set("all_tasks_vs_flop_floor", ratio(h.out[key], floor), h.src[key])
    if (h.m.items.get(all_id) or {}).get("all_tasks_mode") == "sequential":
        h.notes.append(f"{key}: {n} offers no all-tasks program; its tasks ran one after "
                       "the other on the same input")


def _swap_and_memory(h: Headline, pal: str) -> None:
    sw = measurement_id(h.prefix, "swap_ms", pal)
    h.set("swap_ms", h.m.get(sw), [sw])
    one_id = measurement_id(h.prefix, "memory", pal, "model_one_task")
    all_id = measurement_id(h.prefix, "memory", pal, "model_all_tasks_program")
    if h.m.get(all_id) is not None:
        h.notes.append("memory_ratio_all_vs_one: all tasks resident as the bundle's all-tasks "
                       "program (trunk loaded once); report.md also lists the three task "
                       "programs loaded side by side")
    else:
        all_id = measurement_id(h.prefix, "memory", pal, "model_all_tasks")
    h.set("memory_ratio_all_vs_one", ratio(h.m.get(all_id), h.m.get(one_id)), [all_id, one_id])
    h.notes.append("memory ratio on RSS after loading and one run, above the process's RSS "
                   "after imports (the model's own memory; the Python/torch baseline would "
                   "flatter the ratio)")


def accuracy_split(data: dict[str, Any]) -> str:
    """Accuracy is reported on test where measured, else dev."""
    accuracy = data.get("accuracy") or {}
    return "test" if any(isinstance(v, dict) and "test" in v for v in accuracy.values()) else "dev"


def _accuracy(h: Headline, pal: str | None) -> None:
    """Averages in points (0-100) of the PAL bundle as its runtime runs it and of the three
    separate fp32 models, and the PAL model's own int8 - fp32 drop."""
    split = accuracy_split(h.data)

    def acc(name: str) -> tuple[float | None, str]:
        mid = measurement_id(h.prefix, "accuracy", name, split, "avg")
        return h.m.get(mid), mid

    fp32 = {n: e for n, e in (h.data.get("accuracy") or {}).items() if n.startswith("fp32:")}
    same: list[str] = []  # the PAL bundle's own run, in fp32
    if pal is not None and h.subs[pal]["precision"] == "int8":
        v, mid = acc(pal)
        h.set("accuracy_avg_pal_int8", v, [mid])
        pal_runs = {str(Path(d).parent.resolve()) for d in h.subs[pal].get("fp32_model_dirs", {}).values()}
        same = [n for n, e in fp32.items() if e.get("run") and str(Path(e["run"]).resolve()) in pal_runs]
        if not same:
            h.notes.append("accuracy_drop_int8_vs_fp32: the PAL bundle's own run was not among --run")
        elif v is not None and acc(same[0])[0] is not None:
            f, fid = acc(same[0])
            h.set("accuracy_drop_int8_vs_fp32", f - v, [fid, mid])  # type: ignore[operator]
    sep = [n for n, e in fp32.items() if e.get("kind") == "separate"]
    if sep:
        v, mid = acc(sep[0])
        h.set("accuracy_avg_separate_fp32", v, [mid])
    if same and sep:
        h.out["training_steps"] = {"joint": fp32[same[0]].get("optimizer_steps"),
                                   "separate": fp32[sep[0]].get("optimizer_steps")}


def check_targets(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    values = dict(summary)
    a, b = summary.get("accuracy_avg_pal_int8"), summary.get("accuracy_avg_separate_fp32")
    values["accuracy_gap_pal_int8_vs_separate_fp32"] = a - b if a is not None and b is not None else None
    out = {}
    for key, (op, bound, what) in TARGETS.items():
        v = values.get(key)
        met = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out[key] = {"value": v, "target": f"{op} {bound}", "met": met, "what": what}
        context = target_context(key, summary.get(TARGET_CONTEXT.get(key, "")))
        if context:
            out[key]["context"] = context
    return out


def target_context(key: str, value: Any) -> str | None:
    """What to read beside a target's value: the FLOP floor of the PAL/plain latency ratio, and
    whether the accuracy gap compares equal training budgets."""
    if key == "latency_ratio_pal_vs_plain" and value is not None:
        return f"its matrix-multiply FLOP floor is {value:.3f}x"
    if key == "accuracy_gap_pal_int8_vs_separate_fp32" and value:
        joint, separate = value.get("joint"), value.get("separate")
        if joint is None or separate is None:
            return "training budgets unknown"
        if joint != separate:
            return (f"unequal budgets: the joint run took {joint:,} optimizer steps for all its "
                    f"tasks, the separate models {separate:,} in all")
        return f"equal budgets ({joint:,} optimizer steps)"
    return None


def pairwise(hosts: list[BenchInput], m: Measurements) -> list[dict[str, Any]]:
    """Each PAL subject against each other subject, condition by condition: PAL / other."""
    out = []
    for prefix, data, _ in hosts:
        subs = host_subjects(data)
        for pal in [n for n, s in subs.items() if s.get("role") == "pal"]:
            for other, s in subs.items():
                if other == pal:
                    continue
                rec: dict[str, Any] = {"pal": pal, "other": other, "other_role": s.get("role"),
                                       "size_ratio": ratio(total_bytes(m, prefix, pal),
                                                           total_bytes(m, prefix, other)),
                                       "latency": {}}
                for row in data["results"]:
                    if row.get("subject") != pal or row.get("p50_ms") is None:
                        continue
                    oid = p50_id(prefix, other, row["config"], row["threads"], row["seq_len"])
                    r = ratio(row["p50_ms"], m.get(oid))
                    if r is not None:
                        rec["latency"][f"{row['config']} t{row['threads']} s{row['seq_len']}"] = r
                out.append(rec)
    return out


def ceiling_fraction(hosts: list[BenchInput], m: Measurements) -> list[dict[str, Any]]:
    """Matmul FLOPs of one inference / p50, against the machine's measured GEMM ceiling."""
    out = []
    for prefix, data, _ in hosts:
        subs = host_subjects(data)
        for row in data["results"]:
            flops, p50 = row.get("matmul_flops"), row.get("p50_ms")
            if not flops or not p50:
                continue
            kind = "int8" if subs.get(row.get("subject"), {}).get("precision") == "int8" else "fp32"
            ceil = m.get(measurement_id(prefix, "ceiling", kind, f"t{row['threads']}"))
            achieved = flops / (p50 / 1e3) / 1e9
            out.append({"id": f"{prefix}{row['id']}", "subject": row["subject"],
                        "config": row["config"], "threads": row["threads"],
                        "seq_len": row["seq_len"], "matmul_gflop": flops / 1e9,
                        "achieved_gflops": achieved, "ceiling": ceil, "ceiling_kind": kind,
                        "fraction": achieved / ceil if ceil else None})
    return out
