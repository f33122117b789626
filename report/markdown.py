"""report.md: the headline against the targets, the figures, then every table by machine."""
from __future__ import annotations

from typing import Any

from palkit.export.arch_records import architecture_table, cpu_record
from palkit.report.recommended import calibration_rows, verdict_rows
from palkit.report.headline import NOT_MEASURED, ratio
from palkit.report.ingest import BenchInput, MiB, host_subjects, machine_label

FIGURE_CAPTIONS = {
    "headline": "PAL bundle against three separate models and the peers, at the headline's "
                "condition; a black tick marks where a bar's target lies",
    "accuracy_vs_size": "accuracy of each benchmarked bundle against its size; dashed lines: "
                        "the same runs in fp32 (PyTorch)",
    "frontier": "each study configuration's accuracy against the latency of all three tasks on "
                "one input; bubble area = task-specific bytes",
}


def fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def render_markdown(report: dict[str, Any], hosts: list[BenchInput],
                    devices: list[BenchInput]) -> str:
    lines = (_machines(report) + _recommended(report) + _figures(report) + _headline(report)
             + _frontier(report))
    for host in hosts:
        label = machine_label(host.data["machine"])
        lines += (_sizes(host.data, label) + _latency(host.data, label) + _load(host.data, label)
                  + _ceiling(report, host, label) + _accuracy(host.data)
                  + _architectures(host.data))
    if report["pairwise"]:
        lines += _pairwise(report)
    for device in devices:
        lines += _device(device)
    return "\n".join(lines) + "\n"


def _machines(report: dict[str, Any]) -> list[str]:
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
              "uses host figures only."]
    return lines


def _figures(report: dict[str, Any]) -> list[str]:
    if not report["charts"]:
        return []
    lines = ["", "## At a glance", ""]
    for name, file in report["charts"].items():
        lines += [f"![{name}]({file})", "", f"*{FIGURE_CAPTIONS[name]}.*", ""]
    return lines[:-1]


def _recommended(report: dict[str, Any]) -> list[str]:
    """The verdict on the recommended configuration, then the run's calibration."""
    rec, cal = report["recommended"], report["calibration"]
    lines = ["", "## The recommended configuration against the separate models", ""]
    if rec is None:
        notes = [n for n in report["summary"]["notes"]
                 if n.startswith("recommended configuration")]
        return lines + [f"Not measured: {'; '.join(notes)}."]
    later = (f"; added later: {', '.join(rec['added_later'])} (top-1 PALs)"
             if rec["added_later"] else "")
    lines += [f"`{rec['bundle']}` (the shared trunk{later}) against `{rec['versus']}`. Each "
              "latency ratio is paired timing: both sides in one process, alternating blocks; "
              "the estimate and its 95% interval (Hodges-Lehmann, Wilcoxon); *level* when the "
              "interval lies within 1.00 ± 3%, *faster* or *slower* only when it excludes that "
              "band (docs/benchmarking.md). Below 1x the bundle is smaller or faster.", "",
              "| measure | value [95%] | reads |", "|---|---:|---|"]
    lines += [f"| {what} | {value} | {reads} |" for what, value, reads in verdict_rows(rec)]
    if cal is not None:
        lines += ["", "**Calibration** (pairs whose true ratio is 1.00): "
                  + ("**noisy run**: " + "; ".join(cal["why"]) if cal["noisy"] else "steady")
                  + (f"; not measured: {', '.join(cal['not_measured'])}"
                     if cal["not_measured"] else "") + ".", "", "| pair | value [95%] | |", "|---|---:|---|"]
        lines += [f"| {what} | {value} | {reads} |" for what, value, reads in
                  calibration_rows(cal)]
    return lines


def _headline(report: dict[str, Any]) -> list[str]:
    s, targets = report["summary"], report["targets"]
    lines = ["", "## The paper's reference: all-layer PALs against their targets", ""]
    notes = s.get("notes") or []
    if all(t["value"] is None for t in targets.values()):
        # one paragraph for what an all-layer PAL bundle would measure; the targets that need
        # something else keep their own notes below
        notes = [n for n in notes if not n.endswith(f": {NOT_MEASURED}")]
        wanting = [key for key in targets if not any(n.startswith(f"{key}:") for n in notes)]
        lines.append("No all-layer PAL bundle with latency results was benched; bench "
                     "`bundles/pals` beside the others to measure "
                     + ", ".join(f"`{key}` ({targets[key]['target']})" for key in wanting) + ".")
    else:
        lines += ["| measure | value | target | met | from |", "|---|---:|---|---|---|"]
        for key, t in targets.items():
            met = {True: "yes", False: "**missed**", None: "not measured"}[t["met"]]
            src = ", ".join(f"`{i}`" for i in report["headline_sources"].get(key, [])) or \
                ("from the two accuracy averages" if key.startswith("accuracy_gap") else "")
            what = f"{t['what']} ({t['context']})" if t.get("context") else t["what"]
            interval = (s.get("intervals") or {}).get(key)
            value = fmt(t["value"], 3) + (f" [{interval[0]:.3f}, {interval[1]:.3f}]"
                                          if interval else "")
            lines.append(f"| {what} (`{key}`) | {value} | {t['target']} | {met} | {src} |")
        for key in ("accuracy_avg_pal_int8", "accuracy_avg_separate_fp32"):
            sources = ", ".join(f"`{i}`" for i in report["headline_sources"].get(key, []))
            lines.append(f"| `{key}` | {fmt(s.get(key), 2)} | — | — | {sources} |")
        missed = [k for k, t in targets.items() if t["met"] is False]
        lines += ["", f"Missed targets: {', '.join(missed) if missed else 'none'}."]
    lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines += [f"- bench: {n}" for n in report.get("host_notes", [])]
    return lines


def _sizes(data: dict[str, Any], label: str) -> list[str]:
    lines = ["", f"## Size on disk ({label})", "",
             "| subject | runtime | precision | trunk MiB | adapters (KiB) | total MiB |",
             "|---|---|---|---:|---|---:|"]
    for name, sub in host_subjects(data).items():
        b = sub.get("bundle", {})
        trunk = b.get("trunk_bytes")
        trunk_s = fmt(trunk / MiB) if isinstance(trunk, (int, float)) else \
            ("per model: " + ", ".join(f"{t} {v / MiB:.1f}" for t, v in (trunk or {}).items())
             if isinstance(trunk, dict) else "—")
        ad = ", ".join(f"{t} {v / 1024:.0f}" for t, v in (b.get("adapter_bytes") or {}).items()) or \
            ", ".join(f"{t} model {v / MiB:.1f} MiB" for t, v in (b.get("per_model_bytes") or {}).items())
        lines.append(f"| {sub.get('label', name)} | {sub.get('runtime')} | {sub.get('precision')} | "
                     f"{trunk_s} | {ad} | {fmt((b.get('total_bytes') or 0) / MiB)} |")
    return lines


def _latency(data: dict[str, Any], label: str) -> list[str]:
    subs = host_subjects(data)
    settings = data.get("settings") or {}
    block, passes = settings.get("block", 1), settings.get("rounds", 1)
    rounds = (f"interleaved rounds of {block} calls each, the first untimed" if block > 1
              else "interleaved rounds")
    median = f"; p50 and p90 are medians over {passes} such processes" if passes > 1 else ""
    lines = ["", f"## Latency ({label}, batch 1, fresh process per subject/threads/length, "
             f"its configurations timed in {rounds}{median})", "",
             "| subject | config | threads | tokens | p50 ms | p90 ms | runs | note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for row in data["results"]:
        note = row.get("error") or ("tasks run one after the other"
                                    if row.get("all_tasks_mode") == "sequential" else "")
        lines.append(f"| {subs.get(row.get('subject'), {}).get('label', row.get('subject'))} | "
                     f"{row['config']} | {row['threads']} | {row['seq_len']} | "
                     f"{fmt(row['p50_ms'])} | {fmt(row['p90_ms'])} | {row['runs']} | {note} |")
    return lines


def _load(data: dict[str, Any], label: str) -> list[str]:
    lines = ["", f"## Load, swap and memory ({label})", "",
             "| subject | cold load ms | load + 1st result ms | swap ms | RSS model, one task MiB | "
             "all tasks, task programs MiB | all tasks, all-tasks program MiB | all / one |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, sub in host_subjects(data).items():
        mem = sub.get("memory_rss_bytes") or {}
        one, all_ = mem.get("model_one_task"), mem.get("model_all_tasks")
        program = mem.get("model_all_tasks_program")
        rt = sub.get("runtime")
        lines.append(f"| {sub.get('label', name)} | {fmt((sub.get('load_ms') or {}).get(rt))} | "
                     f"{fmt((sub.get('first_result_ms') or {}).get(rt))} | "
                     f"{fmt((sub.get('swap_ms') or {}).get(rt))} | "
                     f"{fmt(one / MiB if one else None)} | {fmt(all_ / MiB if all_ else None)} | "
                     f"{fmt(program / MiB if program else None)} | "
                     f"{fmt(ratio(program or all_, one))} |")
    return lines


def _ceiling(report: dict[str, Any], host: BenchInput, label: str) -> list[str]:
    ceil = host.data.get("ceiling") or {}
    if not ceil:
        return []
    lines = ["", f"## The machine's ceiling ({label})", "",
             "| threads | fp32 GFLOP/s (best) | int8 GOP/s (best) |", "|---:|---:|---:|"]
    for n, c in sorted(ceil.items()):
        lines.append(f"| {n} | {fmt(c.get('fp32_gflops_best'), 1)} | {fmt(c.get('int8_gops_best'), 1)} |")
    lines += ["", "Fraction of the ceiling each configuration reaches (matmul FLOPs of one "
              "inference / p50; int8 subjects against the int8 ceiling):", "",
              "| subject | config | threads | tokens | GFLOP | achieved GFLOP/s | fraction |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for c in report["ceiling_fraction"]:
        if c["id"].startswith(host.key) or not host.key:
            lines.append(f"| {c['subject']} | {c['config']} | {c['threads']} | {c['seq_len']} | "
                         f"{c['matmul_gflop']:.3f} | {c['achieved_gflops']:.1f} | "
                         f"{fmt(c['fraction'], 3)} |")
    return lines


def _accuracy(data: dict[str, Any]) -> list[str]:
    acc = data.get("accuracy") or {}
    if not acc:
        return []
    lines = ["", "## Accuracy (points; exported artifacts as the runtime runs them, "
             "fp32 runs in PyTorch)", "", "| model | split | avg | per task |", "|---|---|---:|---|"]
    for name, per in acc.items():
        for split, metrics in per.items():
            if not isinstance(metrics, dict):
                continue
            detail = ", ".join(f"{k} {v * 100:.1f}" for k, v in metrics.items()
                               if isinstance(v, float) and k != "avg")
            avg = metrics.get("avg")
            lines.append(f"| {name} | {split} | {fmt(avg * 100 if avg is not None else None)} | {detail} |")
    return lines


def _architectures(data: dict[str, Any]) -> list[str]:
    """`palkit verify-arch`'s records that bench found in its bundles' verify.json."""
    lines: list[str] = []
    for name, sub in host_subjects(data).items():
        for record in map(cpu_record, (sub.get("architectures") or {}).values()):
            lines += ["", f"## int8 on {record['arch']} {record['cpu']} ({record['cpu_int8']}): "
                      f"{sub.get('label', name)} (`palkit verify-arch`, {record.get('date')}, "
                      f"verified on {record.get('verifying_machine')}; accuracy, not speed)", "",
                      architecture_table(record)]
    return lines


def _pairwise(report: dict[str, Any]) -> list[str]:
    lines = ["", "## PAL bundle / each other configuration, pair by pair (host)", "",
             "| PAL | vs | size ratio | latency ratios (p50) |", "|---|---|---:|---|"]
    for p in report["pairwise"]:
        lat = ", ".join(f"{k}: {v:.2f}" for k, v in p["latency"].items())
        lines.append(f"| {p['pal']} | {p['other']} | {fmt(p['size_ratio'], 3)} | {lat} |")
    return lines


def _device(device: BenchInput) -> list[str]:
    data = device.data
    lines = ["", f"## {machine_label(data['machine'])}", "", f"From `{device.file}` (the Android app).",
             "", "| runtime | config | threads | tokens | p50 ms | p90 ms | runs |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for row in data["results"]:
        lines.append(f"| {row['runtime']} | {row['config']} | {row['threads']} | {row['seq_len']} | "
                     f"{fmt(row['p50_ms'])} | {fmt(row['p90_ms'])} | {row['runs']} |")
    figures = (("bundle", "bundle {}", str), ("load_ms", "load ms, {}", fmt),
               ("swap_ms", "swap ms, {}", lambda v: v if isinstance(v, dict) else fmt(v)),
               ("memory_rss_bytes", "RSS {}, MiB", lambda v: fmt(v / MiB)))
    return lines + ["", "| figure | value |", "|---|---:|"] + [
        f"| {name.format(k)} | {show(v)} |" for key, name, show in figures
        for k, v in (data.get(key) or {}).items()]


def _frontier(report: dict[str, Any]) -> list[str]:
    deployment = report.get("frontier")
    if not deployment:
        return []
    rec = deployment["recommendation"]
    lines = ["", "## Which configuration to ship", "",
             f"- **All tasks on every input: {rec['all_tasks'] or '—'}.**",
             f"- **One task at a time: {rec['one_task'] or '—'}.**",
             f"- Best PAL placement: {rec['best_placement'] or '—'} (all tasks / one task "
             f"{fmt(rec['all_tasks_ratio_best_placement'])}, accuracy vs all-layer PALs "
             f"{fmt(rec['best_placement_accuracy_gap'])} points).", ""]
    lines += [f"From `{deployment['accuracy_file']}`; " + "; ".join(rec["notes"]) + "."]
    sd = deployment.get("accuracy_sd_points")
    if sd is not None:
        lines += ["", f"Seed-to-seed standard deviation of the dev average in that study: about "
                  f"{sd:.1f} points, on top of the dev sets' own sampling error; read small "
                  "accuracy differences as ties."]
    lines += ["", "| configuration | accuracy | task-specific MiB | bundle MiB | one task ms, "
              "ExecuTorch | one task ms, ONNX Runtime | all tasks ms | all / one |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in deployment["points"]:
        mib = lambda v: fmt(v / MiB if v is not None else None)  # noqa: E731
        lines.append(f"| {p['name']} | {p['accuracy']:.1f} ({p['split']}) | "
                     f"{mib(p.get('task_specific_bytes'))} | {mib(p.get('bundle_bytes'))} | "
                     f"{fmt(p['one_task_ms'].get('executorch'), 1)} | "
                     f"{fmt(p['one_task_ms'].get('onnxruntime'), 1)} | "
                     f"{fmt(p.get('all_tasks_ms'), 1)} | {fmt(p.get('all_tasks_ratio'))} |")
    return lines
