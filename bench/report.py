"""`cli.py report`: turn palkit-bench files (host and phone) into report.md / report.json / PNGs.

Every number the report shows is a *measurement* with an id (report.json "measurements"); every
headline ratio in summary.json names the ids it was computed from ("sources"), so each figure
can be traced back to one worker run in one bench file. Host figures are labelled with the host
CPU, phone figures with the phone model; the headline uses host figures only.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.schema import load_bench_file
from trainer.errors import PalkitError

MiB = 1024 * 1024
REF_SEQ, REF_THREADS = 128, 1

# target: (comparison, bound, what) -- checked in the report, never asserted
TARGETS = {
    "size_ratio_vs_three_separate": ("<=", 0.40, "PAL int8, all three tasks, bytes / three separate int8 models"),
    "size_ratio_vs_one_separate": ("<=", 1.10, "PAL int8 bytes / one separate int8 model"),
    "latency_ratio_pal_vs_plain": ("<=", 1.15, "one task p50 / plain no-PAL int8 classifier, same runtime"),
    "latency_ratio_pal_vs_best_peer": ("<=", 1.00, "one task p50 / fastest peer"),
    "all_tasks_ratio_all_layers": ("<=", 2.2, "all three tasks on one input / one task (all-layer PALs)"),
    "all_tasks_ratio_top_half": ("<=", 1.7, "all three tasks on one input / one task (top-half PALs)"),
    "swap_ms": ("<=", 10.0, "adapter swap, ms"),
    "memory_ratio_all_vs_one": ("<=", 1.3, "memory with all three resident / one"),
    "accuracy_gap_pal_int8_vs_separate_fp32": (">=", -1.0, "PAL int8 avg - three separate fp32 avg, points"),
    "accuracy_drop_int8_vs_fp32": ("<=", 0.5, "fp32 avg - int8 avg of the same PAL model, points"),
}
SUMMARY_KEYS = ("machine", "size_ratio_vs_three_separate", "size_ratio_vs_one_separate",
                "latency_ratio_pal_vs_plain", "latency_ratio_pal_vs_best_peer",
                "all_tasks_ratio_all_layers", "all_tasks_ratio_top_half", "swap_ms",
                "memory_ratio_all_vs_one", "accuracy_avg_pal_int8", "accuracy_avg_separate_fp32",
                "accuracy_drop_int8_vs_fp32", "notes")


class ReportError(PalkitError, ValueError):
    """The report cannot be written from these inputs."""


def machine_label(machine: dict[str, Any]) -> str:
    if machine["kind"] == "android":
        maker = machine.get("manufacturer")
        name = f"{maker} {machine['model']}" if maker and maker not in machine["model"] else machine["model"]
        return f"phone: {name} (Android {machine.get('android_version', '?')}, {machine.get('abi', '?')})"
    cores = machine.get("cores_logical")
    return f"host CPU: {machine['model']} ({cores} cores)" if cores else f"host CPU: {machine['model']}"


class Measurements:
    """id -> {value, unit, machine, file, what}; the only place numbers come from."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def add(self, mid: str, value: Any, unit: str, machine: str, file: str, what: str,
            **extra: Any) -> None:
        if value is None:
            return
        self.items[mid] = {"value": value, "unit": unit, "machine": machine, "file": file,
                           "what": what, **extra}

    def get(self, mid: str) -> float | None:
        item = self.items.get(mid)
        return None if item is None else item["value"]


# ---- reading bench files into measurements ----------------------------------------------------

def host_subjects(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return data.get("subjects") or {}


def ingest_host(data: dict[str, Any], prefix: str, file: str, m: Measurements) -> None:
    label = machine_label(data["machine"])
    for name, s in host_subjects(data).items():
        sizes = s.get("bundle", {})
        m.add(f"{prefix}size:{name}:total_bytes", sizes.get("total_bytes"), "bytes", label, file,
              f"{s.get('label', name)}: model files for all its tasks")
        trunk = sizes.get("trunk_bytes")
        if isinstance(trunk, (int, float)):
            m.add(f"{prefix}size:{name}:trunk_bytes", trunk, "bytes", label, file, "shared trunk")
        for task, b in (sizes.get("adapter_bytes") or {}).items():
            m.add(f"{prefix}size:{name}:adapter:{task}", b, "bytes", label, file, f"{task} adapter blob")
        for task, b in (sizes.get("per_model_bytes") or {}).items():
            m.add(f"{prefix}size:{name}:model:{task}", b, "bytes", label, file, f"{task} model")
        rt = s.get("runtime")
        for key, what in (("load_ms", "cold load (trunk + first task, to runnable)"),
                          ("first_result_ms", "cold load + first inference")):
            m.add(f"{prefix}{key}:{name}", (s.get(key) or {}).get(rt), "ms", label, file, what)
        m.add(f"{prefix}swap_ms:{name}", (s.get("swap_ms") or {}).get(rt), "ms", label, file,
              "swap to a not-yet-loaded task (median over tasks), to runnable")
        for key, v in (s.get("memory_rss_bytes") or {}).items():
            m.add(f"{prefix}memory:{name}:{key}", v, "bytes", label, file, f"RSS {key}")
    for row in data["results"]:
        rid = row.get("id") or (f"latency:{row.get('subject', 'bundle')}:{row['config']}"
                                f":t{row['threads']}:s{row['seq_len']}")
        for q in ("p50_ms", "p90_ms"):
            m.add(f"{prefix}{rid}:{q}", row.get(q), "ms", label, file,
                  f"{row.get('subject', '')} {row['runtime']} {row['config']} {row['threads']} "
                  f"thread(s) {row['seq_len']} tokens {q[:3]}",
                  all_tasks_mode=row.get("all_tasks_mode"))
    for n, c in (data.get("ceiling") or {}).items():
        m.add(f"{prefix}ceiling:fp32:t{n}", c.get("fp32_gflops_best"), "GFLOP/s", label, file,
              f"best fp32 GEMM, {n} thread(s)")
        m.add(f"{prefix}ceiling:int8:t{n}", c.get("int8_gops_best"), "GOP/s", label, file,
              f"best int8 GEMM, {n} thread(s)")
    for name, per_split in (data.get("accuracy") or {}).items():
        for split, metrics in per_split.items():
            if not isinstance(metrics, dict):
                continue
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    m.add(f"{prefix}accuracy:{name}:{split}:{k}", v * 100 if k != "max_len" else v,
                          "points" if k != "max_len" else "tokens", label, file,
                          f"{name} {split} {k}")


def ingest_device(data: dict[str, Any], file: str, m: Measurements) -> str:
    label = machine_label(data["machine"])
    dev = "device:" + data["machine"]["model"].replace(" ", "_")
    for k, v in (data.get("bundle") or {}).items():
        if isinstance(v, (int, float)):
            m.add(f"{dev}:size:{k}", v, "bytes", label, file, f"bundle {k}")
    for rt, v in (data.get("load_ms") or {}).items():
        m.add(f"{dev}:load_ms:{rt}", v, "ms", label, file, f"cold load on {rt}")
    for rt, v in (data.get("swap_ms") or {}).items():
        if isinstance(v, (int, float)):
            m.add(f"{dev}:swap_ms:{rt}", v, "ms", label, file, f"adapter swap on {rt}")
    for k, v in (data.get("memory_rss_bytes") or {}).items():
        m.add(f"{dev}:memory:{k}", v, "bytes", label, file, f"RSS {k}")
    for row in data["results"]:
        rid = f"{dev}:latency:{row['runtime']}:{row['config']}:t{row['threads']}:s{row['seq_len']}"
        for q in ("p50_ms", "p90_ms"):
            m.add(f"{rid}:{q}", row.get(q), "ms", label, file,
                  f"{row['runtime']} {row['config']} {row['threads']} thread(s) {row['seq_len']} tokens")
    return dev


# ---- the headline --------------------------------------------------------------------------------

def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _task_p50(m: Measurements, prefix: str, subject: str, tasks: list[str], threads: int,
              seq: int) -> tuple[float | None, list[str]]:
    ids = [f"{prefix}latency:{subject}:task:{t}:t{threads}:s{seq}:p50_ms" for t in tasks]
    vals = [m.get(i) for i in ids]
    if not vals or any(v is None for v in vals):
        return None, ids
    return statistics.fmean(vals), ids  # type: ignore[arg-type]


def headline(data: dict[str, Any], prefix: str, m: Measurements) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary values, and for each the measurement ids it came from."""
    subs = host_subjects(data)
    notes: list[str] = []
    src: dict[str, list[str]] = {}
    out: dict[str, Any] = {k: None for k in SUMMARY_KEYS}
    out["machine"] = machine_label(data["machine"])
    threads = REF_THREADS if any(r["threads"] == REF_THREADS for r in data["results"]) else \
        min((r["threads"] for r in data["results"]), default=REF_THREADS)
    seq = REF_SEQ if any(r["seq_len"] == REF_SEQ for r in data["results"]) else \
        max((r["seq_len"] for r in data["results"]), default=REF_SEQ)
    notes.append(f"latency ratios at {seq} tokens, {threads} thread(s), p50, mean over tasks; "
                 "every other condition is in report.md")

    def pick(role: str, **want: Any) -> list[str]:
        return [n for n, s in subs.items() if s.get("role") == role
                and all(s.get(k) == v for k, v in want.items())]

    pals = [n for n in pick("pal") if subs[n].get("precision") == "int8"] or pick("pal")
    all_layer = [n for n in pals if subs[n].get("pal_layers") in ("all", "unknown")] or pals
    top_half = [n for n in pals if subs[n].get("pal_layers") == "top"]

    def fastest(names: list[str]) -> tuple[str | None, float | None, list[str]]:
        best = (None, None, [])
        for n in names:
            v, ids = _task_p50(m, prefix, n, subs[n]["tasks"], threads, seq)
            if v is not None and (best[1] is None or v < best[1]):
                best = (n, v, ids)
        return best

    pal, pal_p50, pal_ids = fastest(all_layer)
    if pal is None:
        notes.append("no PAL bundle with latency results: latency, size, swap and memory "
                     "headlines are null")
    else:
        s = subs[pal]
        tasks = s["tasks"]
        notes.append(f"PAL subject: {pal} (fastest PAL runtime at the reference condition)")
        # plain: our own no-PAL separate bundles on the same runtime and precision
        plain = pick("separate", runtime=s["runtime"], precision=s["precision"])
        if plain:
            v, ids = _task_p50(m, prefix, plain[0], tasks, threads, seq)
            out["latency_ratio_pal_vs_plain"] = _ratio(pal_p50, v)
            src["latency_ratio_pal_vs_plain"] = pal_ids + ids
        else:
            notes.append(f"latency_ratio_pal_vs_plain: no separate {s['precision']} bundles on "
                         f"{s['runtime']} were benchmarked (export runs/separate and pass them)")
        peer, peer_p50, peer_ids = fastest(pick("peer"))
        if peer:
            out["latency_ratio_pal_vs_best_peer"] = _ratio(pal_p50, peer_p50)
            src["latency_ratio_pal_vs_best_peer"] = pal_ids + peer_ids
            notes.append(f"fastest peer: {peer}")
        else:
            notes.append("latency_ratio_pal_vs_best_peer: no peers measured (pass --run runs/separate)")
        # size: three separate int8 models on the same runtime (our bundles, else the peer)
        ref = plain or [n for n in pick("peer", runtime=s["runtime"], precision="int8")]
        total_id = f"{prefix}size:{pal}:total_bytes"
        if ref:
            r = ref[0]
            three_id = f"{prefix}size:{r}:total_bytes"
            per = [i for i in m.items if i.startswith(f"{prefix}size:{r}:model:")]
            out["size_ratio_vs_three_separate"] = _ratio(m.get(total_id), m.get(three_id))
            src["size_ratio_vs_three_separate"] = [total_id, three_id]
            if per:
                one = statistics.fmean(m.get(i) for i in per)  # type: ignore[misc]
                out["size_ratio_vs_one_separate"] = _ratio(m.get(total_id), one)
                src["size_ratio_vs_one_separate"] = [total_id, *per]
            notes.append(f"size reference: {r}")
        else:
            notes.append(f"size ratios: no separate int8 models on {s['runtime']} were measured")
        # all tasks on one input vs one task
        for key, names in (("all_tasks_ratio_all_layers", all_layer),
                           ("all_tasks_ratio_top_half", top_half)):
            # A runtime with an all-tasks program is how a user runs every task; without one
            # the tasks run one after the other.
            cand = [n for n in names if subs[n].get("all_tasks_program")] or names
            if not cand:
                notes.append(f"{key}: no {'top-half' if 'top' in key else 'all-layer'} PAL bundle "
                             "was benchmarked")
                continue
            n = fastest(cand)[0] or cand[0]
            notes.append(f"{key}: subject {n}")
            one, one_ids = _task_p50(m, prefix, n, subs[n]["tasks"], threads, seq)
            all_id = f"{prefix}latency:{n}:all_tasks:t{threads}:s{seq}:p50_ms"
            out[key] = _ratio(m.get(all_id), one)
            src[key] = [all_id, *one_ids]
            flops = {r["config"]: r.get("matmul_flops") for r in data["results"]
                     if r.get("subject") == n and r["threads"] == threads and r["seq_len"] == seq}
            one_flops = [flops.get(f"task:{t}") for t in subs[n]["tasks"]]
            if flops.get("all_tasks") and all(one_flops):
                notes.append(f"{key}: all tasks take {flops['all_tasks'] / statistics.fmean(one_flops):.2f}"
                             "x one task's matrix-multiply FLOPs, the floor of this ratio when "
                             "inference is compute-bound")
            mode = (m.items.get(all_id) or {}).get("all_tasks_mode")
            if mode == "sequential":
                notes.append(f"{key}: {n} offers no all-tasks program; its tasks ran one after "
                             "the other on the same input")
        sw = f"{prefix}swap_ms:{pal}"
        out["swap_ms"] = m.get(sw)
        src["swap_ms"] = [sw]
        one_id = f"{prefix}memory:{pal}:model_one_task"
        all_id = f"{prefix}memory:{pal}:model_all_tasks_program"
        if m.get(all_id) is not None:
            notes.append("memory_ratio_all_vs_one: all tasks resident as the bundle's all-tasks "
                         "program (trunk loaded once); report.md also lists the three task "
                         "programs loaded side by side")
        else:
            all_id = f"{prefix}memory:{pal}:model_all_tasks"
        out["memory_ratio_all_vs_one"] = _ratio(m.get(all_id), m.get(one_id))
        src["memory_ratio_all_vs_one"] = [all_id, one_id]
        notes.append("memory ratio on RSS after loading and one run, above the process's RSS "
                     "after imports (the model's own memory; the Python/torch baseline would "
                     "flatter the ratio)")
    # accuracy, in points (0-100): prefer test, else dev
    accuracy = data.get("accuracy") or {}
    split = "test" if any(isinstance(v, dict) and "test" in v for v in accuracy.values()) else "dev"

    def acc(name: str) -> tuple[float | None, str]:
        mid = f"{prefix}accuracy:{name}:{split}:avg"
        return m.get(mid), mid

    fp32 = {n: e for n, e in accuracy.items() if n.startswith("fp32:")}
    if pal is not None and subs[pal]["precision"] == "int8":
        v, mid = acc(pal)
        out["accuracy_avg_pal_int8"], src["accuracy_avg_pal_int8"] = v, [mid]
        pal_runs = {str(Path(d).parent.resolve()) for d in subs[pal].get("fp32_model_dirs", {}).values()}
        same = [n for n, e in fp32.items() if e.get("run") and str(Path(e["run"]).resolve()) in pal_runs]
        if not same:
            notes.append("accuracy_drop_int8_vs_fp32: the PAL bundle's own run was not among --run")
        elif v is not None and acc(same[0])[0] is not None:
            f, fid = acc(same[0])
            out["accuracy_drop_int8_vs_fp32"] = f - v  # type: ignore[operator]
            src["accuracy_drop_int8_vs_fp32"] = [fid, mid]
    sep = [n for n, e in fp32.items() if e.get("kind") == "separate"]
    if sep:
        v, mid = acc(sep[0])
        out["accuracy_avg_separate_fp32"], src["accuracy_avg_separate_fp32"] = v, [mid]
    for key in SUMMARY_KEYS:
        if key not in ("machine", "notes") and out[key] is None:
            if not any(n.startswith(f"{key}:") for n in notes):
                notes.append(f"{key}: not measured (the inputs lack what it needs)")
    notes.append(f"accuracy in points (0-100, the trainer's average: accuracies and "
                 f"(Pearson+1)/2) on the {split} split")
    out["notes"] = notes
    return out, src


def check_targets(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    values = dict(summary)
    a, b = summary.get("accuracy_avg_pal_int8"), summary.get("accuracy_avg_separate_fp32")
    values["accuracy_gap_pal_int8_vs_separate_fp32"] = a - b if a is not None and b is not None else None
    out = {}
    for key, (op, bound, what) in TARGETS.items():
        v = values.get(key)
        met = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out[key] = {"value": v, "target": f"{op} {bound}", "met": met, "what": what}
    return out


# ---- charts ----------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def chart_sizes(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.8))
    labels = [r["label"] for r in rows]
    trunk = [r["trunk"] / MiB for r in rows]
    rest = [(r["total"] - r["trunk"]) / MiB for r in rows]
    ax.barh(labels, trunk, label="trunk(s) / models", color="#4c72b0")
    ax.barh(labels, rest, left=trunk, label="adapters / heads", color="#dd8452")
    for i, r in enumerate(rows):
        ax.text(r["total"] / MiB, i, f" {r['total'] / MiB:.1f}", va="center", fontsize=8)
    ax.set_xlabel("MiB on disk (all three tasks)")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_latency(groups: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """One panel per (seq_len, threads): p50 bars with a whisker up to p90."""
    plt = _plt()
    keys = sorted(groups)
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 0.32 * max(len(v) for v in groups.values())
                                                        * len(keys) + 1.5 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        rows = groups[key]
        labels = [r["label"] for r in rows]
        p50 = [r["p50"] for r in rows]
        err = [[0] * len(rows), [max(0.0, r["p90"] - r["p50"]) for r in rows]]
        colors = ["#55a868" if r["machine_kind"] == "android" else
                  "#c44e52" if r["ours"] else "#8c8c8c" for r in rows]
        ax.barh(labels, p50, xerr=err, color=colors, capsize=2)
        ax.set_title(key, fontsize=9)
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlabel("ms (bar p50, whisker to p90)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_accuracy(points: list[dict[str, Any]], path: Path, split: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in points:
        ax.scatter(p["mib"], p["acc"], s=40, color="#c44e52" if p["ours"] else "#4c72b0")
        ax.annotate(p["label"], (p["mib"], p["acc"]), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")
    ax.set_xlabel("MiB on disk (all three tasks)")
    ax.set_ylabel(f"average score, {split} (points)")
    ax.set_title("accuracy vs size", fontsize=10)
    if not points:
        ax.text(0.5, 0.5, "no accuracy measured", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the report ------------------------------------------------------------------------------

def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def build_report(bench_files: list[Path], device_files: list[Path], out: Path,
                 summary_path: Path | None = None) -> dict[str, Any]:
    if not bench_files and not device_files:
        raise ReportError("nothing to report: give --bench FILE (from `cli.py bench`) and/or "
                          "--device-results FILE (from the Android app)")
    m = Measurements()
    hosts: list[tuple[str, dict[str, Any], str]] = []
    devices: list[tuple[str, dict[str, Any], str]] = []
    for i, f in enumerate(bench_files):
        data = load_bench_file(f)
        if data["machine"]["kind"] == "android":
            devices.append((ingest_device(data, str(f), m), data, str(f)))
            continue
        prefix = "" if not hosts else f"host{len(hosts) + 1}:"
        ingest_host(data, prefix, str(f), m)
        hosts.append((prefix, data, str(f)))
    for f in device_files:
        data = load_bench_file(f)
        if data["machine"]["kind"] != "android":
            raise ReportError(f"{f}: --device-results expects the phone app's file "
                              f"(machine.kind android), this one is {data['machine']['kind']}; "
                              "pass it with --bench")
        devices.append((ingest_device(data, str(f), m), data, str(f)))

    summary: dict[str, Any]
    sources: dict[str, Any] = {}
    if hosts:
        summary, sources = headline(hosts[0][1], hosts[0][0], m)
    else:
        summary = {k: None for k in SUMMARY_KEYS}
        summary["machine"] = None
        summary["notes"] = ["no host bench file: the headline needs `cli.py bench` results"]
    for key, ids in sources.items():
        missing = [i for i in ids if i not in m.items]
        if summary.get(key) is not None and missing:
            raise ReportError(f"internal: headline {key} cites unknown measurements {missing}")
    targets = check_targets(summary)
    out.mkdir(parents=True, exist_ok=True)
    charts = write_charts(hosts, devices, m, out)
    report = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
              "inputs": {"bench": [str(f) for f in bench_files],
                         "device_results": [str(f) for f in device_files]},
              "machines": [{"label": machine_label(d["machine"]), "file": f, **d["machine"]}
                           for _, d, f in hosts + devices],
              "summary": summary, "headline_sources": sources, "targets": targets,
              "pairwise": pairwise(hosts, m), "ceiling_fraction": ceiling_fraction(hosts, m),
              "charts": charts, "measurements": m.items,
              "host_notes": [n for _, d, _ in hosts for n in d.get("notes", [])]}
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (out / "report.md").write_text(render_markdown(report, hosts, devices, m))
    if summary_path is not None:
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps({**{k: summary[k] for k in SUMMARY_KEYS},
                                            "sources": sources,
                                            "report": str(out / "report.json")},
                                           indent=1, sort_keys=True) + "\n")
    return report


def _subject_latency_rows(prefix: str, data: dict[str, Any], m: Measurements):
    for row in data["results"]:
        rid = f"{prefix}{row['id']}" if row.get("id") else None
        if rid and m.get(f"{rid}:p50_ms") is not None:
            yield row, rid


def pairwise(hosts, m: Measurements) -> list[dict[str, Any]]:
    """Each PAL subject against each other subject, condition by condition: PAL / other."""
    out = []
    for prefix, data, _ in hosts:
        subs = host_subjects(data)
        pals = [n for n, s in subs.items() if s.get("role") == "pal"]
        for pal in pals:
            for other, s in subs.items():
                if other == pal:
                    continue
                rec: dict[str, Any] = {"pal": pal, "other": other, "other_role": s.get("role"),
                                       "size_ratio": _ratio(m.get(f"{prefix}size:{pal}:total_bytes"),
                                                            m.get(f"{prefix}size:{other}:total_bytes")),
                                       "latency": {}}
                for row in data["results"]:
                    if row.get("subject") != pal or row.get("p50_ms") is None:
                        continue
                    oid = f"{prefix}latency:{other}:{row['config']}:t{row['threads']}:s{row['seq_len']}:p50_ms"
                    r = _ratio(row["p50_ms"], m.get(oid))
                    if r is not None:
                        rec["latency"][f"{row['config']} t{row['threads']} s{row['seq_len']}"] = r
                out.append(rec)
    return out


def ceiling_fraction(hosts, m: Measurements) -> list[dict[str, Any]]:
    out = []
    for prefix, data, _ in hosts:
        subs = host_subjects(data)
        for row in data["results"]:
            flops, p50 = row.get("matmul_flops"), row.get("p50_ms")
            if not flops or not p50:
                continue
            prec = subs.get(row.get("subject"), {}).get("precision", "fp32")
            kind = "int8" if prec == "int8" else "fp32"
            ceil = m.get(f"{prefix}ceiling:{kind}:t{row['threads']}")
            achieved = flops / (p50 / 1e3) / 1e9
            out.append({"id": f"{prefix}{row['id']}", "subject": row["subject"],
                        "config": row["config"], "threads": row["threads"],
                        "seq_len": row["seq_len"], "matmul_gflop": flops / 1e9,
                        "achieved_gflops": achieved, "ceiling": ceil, "ceiling_kind": kind,
                        "fraction": achieved / ceil if ceil else None})
    return out


def write_charts(hosts, devices, m: Measurements, out: Path) -> dict[str, str]:
    charts = {}
    size_rows = []
    for prefix, data, _ in hosts:
        for name, s in host_subjects(data).items():
            total = m.get(f"{prefix}size:{name}:total_bytes")
            if total is None:
                continue
            trunk = m.get(f"{prefix}size:{name}:trunk_bytes")
            if trunk is None:
                trunk = total - sum(v for k, v in (s.get("bundle", {}).get("adapter_bytes") or {}).items())
            size_rows.append({"label": s.get("label", name), "total": total, "trunk": trunk})
    for dev, data, _ in devices:
        for k, v in (data.get("bundle") or {}).items():
            if isinstance(v, (int, float)) and k.endswith("bytes"):
                size_rows.append({"label": f"{data['machine']['model']}: {k}", "total": v, "trunk": v})
    chart_sizes(size_rows, out / "sizes.png", "size on disk")
    charts["sizes"] = "sizes.png"
    groups: dict[str, list[dict[str, Any]]] = {}
    for prefix, data, _ in hosts:
        subs = host_subjects(data)
        for row, rid in _subject_latency_rows(prefix, data, m):
            key = f"{row['seq_len']} tokens, {row['threads']} thread(s)"
            s = subs.get(row.get("subject"), {})
            groups.setdefault(key, []).append({
                "label": f"host: {s.get('label', row.get('subject'))} {row['config']}",
                "p50": row["p50_ms"], "p90": row["p90_ms"] or row["p50_ms"],
                "ours": s.get("role") in ("pal",), "machine_kind": "host"})
    for dev, data, _ in devices:
        for row in data["results"]:
            if row.get("p50_ms") is None:
                continue
            key = f"{row['seq_len']} tokens, {row['threads']} thread(s)"
            groups.setdefault(key, []).append({
                "label": f"{data['machine']['model']}: {row['runtime']} {row['config']}",
                "p50": row["p50_ms"], "p90": row["p90_ms"] or row["p50_ms"], "ours": True,
                "machine_kind": "android"})
    if groups:
        chart_latency(groups, out / "latency.png")
        charts["latency"] = "latency.png"
    points = []
    split = "test"
    for prefix, data, _ in hosts:
        acc = data.get("accuracy") or {}
        split = "test" if any("test" in v for v in acc.values()) else "dev"
        subs = host_subjects(data)
        for name, per in acc.items():
            v = m.get(f"{prefix}accuracy:{name}:{split}:avg")
            if v is None:
                continue
            if name in subs:
                size = m.get(f"{prefix}size:{name}:total_bytes")
                label, ours = subs[name].get("label", name), subs[name].get("role") == "pal"
            else:  # an fp32 run: its safetensors
                size = per.get("bytes") if isinstance(per, dict) else None
                size = size or _run_bytes(acc[name].get("run"))
                label, ours = f"{name} (PyTorch)", per.get("kind") != "separate"
            if size:
                points.append({"mib": size / MiB, "acc": v, "label": label, "ours": ours})
    chart_accuracy(points, out / "accuracy_vs_size.png", split)
    charts["accuracy_vs_size"] = "accuracy_vs_size.png"
    return charts


def _run_bytes(run: str | None) -> int | None:
    if not run or not Path(run).exists():
        return None
    return sum(p.stat().st_size for p in Path(run).glob("**/model/**/*.safetensors")
               if "optimizer" not in p.name) or None


def render_markdown(report: dict[str, Any], hosts, devices, m: Measurements) -> str:
    s = report["summary"]
    lines = ["# palkit: size, latency, memory and accuracy", "",
             f"Generated {report['generated']} from " +
             ", ".join(f"`{f}`" for f in report["inputs"]["bench"] + report["inputs"]["device_results"]),
             "", "## Machines", ""]
    for mach in report["machines"]:
        load = mach.get("load_avg_1min_at_start")
        lines.append(f"- **{mach['label']}** — `{mach['file']}`" +
                     (f"; load average at start {load:.2f}" if isinstance(load, (int, float)) else "") +
                     (f"; {mach.get('os')}" if mach.get("os") else ""))
    lines += ["", "Host figures are measured on the host CPU (labelled *host*); phone figures "
              "come from the Android app and are labelled with the phone model. The headline "
              "uses host figures only.", "", "## Headline vs targets", "",
              "| measure | value | target | met | from |", "|---|---:|---|---|---|"]
    for key, t in report["targets"].items():
        met = {True: "yes", False: "**missed**", None: "not measured"}[t["met"]]
        src = ", ".join(f"`{i}`" for i in report["headline_sources"].get(key, [])) or \
            ("from the two accuracy averages" if key.startswith("accuracy_gap") else "")
        lines.append(f"| {t['what']} (`{key}`) | {_fmt(t['value'], 3)} | {t['target']} | {met} | {src} |")
    for key in ("accuracy_avg_pal_int8", "accuracy_avg_separate_fp32"):
        lines.append(f"| `{key}` | {_fmt(s.get(key), 2)} | — | — | "
                     f"{', '.join(f'`{i}`' for i in report['headline_sources'].get(key, []))} |")
    missed = [k for k, t in report["targets"].items() if t["met"] is False]
    lines += ["", f"Missed targets: {', '.join(missed) if missed else 'none'}.", "", "Notes:", ""]
    lines += [f"- {n}" for n in s.get("notes") or []]
    lines += [f"- bench: {n}" for n in report.get("host_notes", [])]
    for prefix, data, file in hosts:
        label = machine_label(data["machine"])
        subs = host_subjects(data)
        lines += ["", f"## Size on disk ({label})", "",
                  "| subject | runtime | precision | trunk MiB | adapters (KiB) | total MiB |",
                  "|---|---|---|---:|---|---:|"]
        for name, sub in subs.items():
            b = sub.get("bundle", {})
            trunk = b.get("trunk_bytes")
            trunk_s = _fmt(trunk / MiB) if isinstance(trunk, (int, float)) else \
                ("per model: " + ", ".join(f"{t} {v / MiB:.1f}" for t, v in (trunk or {}).items())
                 if isinstance(trunk, dict) else "—")
            ad = ", ".join(f"{t} {v / 1024:.0f}" for t, v in (b.get("adapter_bytes") or {}).items()) or \
                ", ".join(f"{t} model {v / MiB:.1f} MiB" for t, v in (b.get("per_model_bytes") or {}).items())
            lines.append(f"| {sub.get('label', name)} | {sub.get('runtime')} | {sub.get('precision')} | "
                         f"{trunk_s} | {ad} | {_fmt((b.get('total_bytes') or 0) / MiB)} |")
        lines += ["", f"## Latency ({label}, batch 1, fresh process per subject/threads/length, "
                  "its configurations timed in interleaved rounds)", "",
                  "| subject | config | threads | tokens | p50 ms | p90 ms | runs | note |",
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        for row in data["results"]:
            note = row.get("error") or ("tasks run one after the other"
                                        if row.get("all_tasks_mode") == "sequential" else "")
            lines.append(f"| {subs.get(row.get('subject'), {}).get('label', row.get('subject'))} | "
                         f"{row['config']} | {row['threads']} | {row['seq_len']} | "
                         f"{_fmt(row['p50_ms'])} | {_fmt(row['p90_ms'])} | {row['runs']} | {note} |")
        lines += ["", f"## Load, swap and memory ({label})", "",
                  "| subject | cold load ms | load + 1st result ms | swap ms | RSS model, one task MiB | "
                  "all tasks, task programs MiB | all tasks, all-tasks program MiB | all / one |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, sub in subs.items():
            mem = sub.get("memory_rss_bytes") or {}
            one, all_ = mem.get("model_one_task"), mem.get("model_all_tasks")
            program = mem.get("model_all_tasks_program")
            rt = sub.get("runtime")
            lines.append(f"| {sub.get('label', name)} | {_fmt((sub.get('load_ms') or {}).get(rt))} | "
                         f"{_fmt((sub.get('first_result_ms') or {}).get(rt))} | "
                         f"{_fmt((sub.get('swap_ms') or {}).get(rt))} | "
                         f"{_fmt(one / MiB if one else None)} | {_fmt(all_ / MiB if all_ else None)} | "
                         f"{_fmt(program / MiB if program else None)} | "
                         f"{_fmt(_ratio(program or all_, one))} |")
        ceil = data.get("ceiling") or {}
        if ceil:
            lines += ["", f"## The machine's ceiling ({label})", "",
                      "| threads | fp32 GFLOP/s (best) | int8 GOP/s (best) |", "|---:|---:|---:|"]
            for n, c in sorted(ceil.items()):
                lines.append(f"| {n} | {_fmt(c.get('fp32_gflops_best'), 1)} | {_fmt(c.get('int8_gops_best'), 1)} |")
            lines += ["", "Fraction of the ceiling each configuration reaches (matmul FLOPs of one "
                      "inference / p50; int8 subjects against the int8 ceiling):", "",
                      "| subject | config | threads | tokens | GFLOP | achieved GFLOP/s | fraction |",
                      "|---|---|---:|---:|---:|---:|---:|"]
            for c in report["ceiling_fraction"]:
                if c["id"].startswith(prefix) or not prefix:
                    lines.append(f"| {c['subject']} | {c['config']} | {c['threads']} | {c['seq_len']} | "
                                 f"{c['matmul_gflop']:.3f} | {c['achieved_gflops']:.1f} | "
                                 f"{_fmt(c['fraction'], 3)} |")
        acc = data.get("accuracy") or {}
        if acc:
            lines += ["", f"## Accuracy (points; exported artifacts as the runtime runs them, "
                      "fp32 runs in PyTorch)", "", "| model | split | avg | per task |",
                      "|---|---|---:|---|"]
            for name, per in acc.items():
                for split, metrics in per.items():
                    if not isinstance(metrics, dict):
                        continue
                    detail = ", ".join(f"{k} {v * 100:.1f}" for k, v in metrics.items()
                                       if isinstance(v, float) and k != "avg")
                    avg = metrics.get("avg")
                    lines.append(f"| {name} | {split} | {_fmt(avg * 100 if avg is not None else None)} | {detail} |")
    if report["pairwise"]:
        lines += ["", "## PAL bundle / each other configuration, pair by pair (host)", "",
                  "| PAL | vs | size ratio | latency ratios (p50) |", "|---|---|---:|---|"]
        for p in report["pairwise"]:
            lat = ", ".join(f"{k}: {v:.2f}" for k, v in p["latency"].items())
            lines.append(f"| {p['pal']} | {p['other']} | {_fmt(p['size_ratio'], 3)} | {lat} |")
    for dev, data, file in devices:
        label = machine_label(data["machine"])
        lines += ["", f"## {label}", "", f"From `{file}` (the Android app).", "",
                  "| runtime | config | threads | tokens | p50 ms | p90 ms | runs |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for row in data["results"]:
            lines.append(f"| {row['runtime']} | {row['config']} | {row['threads']} | {row['seq_len']} | "
                         f"{_fmt(row['p50_ms'])} | {_fmt(row['p90_ms'])} | {row['runs']} |")
        lines += ["", "| figure | value |", "|---|---:|"]
        for k, v in (data.get("bundle") or {}).items():
            lines.append(f"| bundle {k} | {v} |")
        for k, v in (data.get("load_ms") or {}).items():
            lines.append(f"| load ms, {k} | {_fmt(v)} |")
        for k, v in (data.get("swap_ms") or {}).items():
            lines.append(f"| swap ms, {k} | {_fmt(v) if not isinstance(v, dict) else v} |")
        for k, v in (data.get("memory_rss_bytes") or {}).items():
            lines.append(f"| RSS {k}, MiB | {_fmt(v / MiB)} |")
    lines += ["", "## Charts", ""] + [f"![{k}]({v})" for k, v in report["charts"].items()]
    return "\n".join(lines) + "\n"
