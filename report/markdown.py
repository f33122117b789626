"""report.md: the verdict and the run's calibration, the figures, the paper's reference against
its targets, the frontier, then every table by machine."""
from __future__ import annotations

from typing import TYPE_CHECKING

from palkit.export.arch_records import architecture_table, cpu_record
from palkit.report.model import MiB, BenchFile, DeviceFile, JsonValue, NoteKind
from palkit.report.published import JOINTBERT_ATIS
from palkit.report.recommend import LAUNCH
from palkit.report.selection import ratio
from palkit.report.verdict import calibration_rows, timing_plan_line, verdict_rows
from palkit.trainer.metrics import SENTENCE_SUFFIX

if TYPE_CHECKING:
    from palkit.report.build import Report

PUBLISHED = (JOINTBERT_ATIS,)


def fmt(v: JsonValue, digits: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def render_markdown(report: Report) -> str:
    lines = (_machines(report) + _recommended(report) + _figures(report) + _reference(report)
             + _frontier(report))
    for host in report.hosts:
        label = host.machine.label
        lines += (_sizes(host, label) + _latency(host, label) + _load(host, label)
                  + _ceiling(report, host, label) + _accuracy(host) + _texts_together(host)
                  + _architectures(host))
    if report.pairwise:
        lines += _pairwise(report)
    for device in report.devices:
        lines += _device(device)
    return "\n".join(lines) + "\n"


def _machines(report: Report) -> list[str]:
    lines = ["# palkit: size, latency, memory and accuracy", "",
             f"Generated {report.generated} from " +
             ", ".join(f"`{f}`" for f in report.inputs["bench"] + report.inputs["device_results"]),
             "", "## Machines", ""]
    for mach in report.machines:
        load = mach.get("load_avg_1min_at_start")
        lines.append(f"- **{mach['label']}** — `{mach['file']}`" +
                     (f"; load average at start {load:.2f}" if isinstance(load, (int, float)) else "") +
                     (f"; {mach.get('os')}" if mach.get("os") else ""))
    lines += ["", "Host figures are measured on the host CPU (labelled *host*); phone figures "
              "come from the Android app and are labelled with the phone model. The headline "
              "uses host figures only."]
    return lines


def _figures(report: Report) -> list[str]:
    if not report.charts:
        return []
    lines = ["", "## At a glance", ""]
    for chart in report.charts:
        lines += [f"![{chart.name}]({chart.file})", "", f"*{chart.caption}.*", ""]
    return lines[:-1]


def _recommended(report: Report) -> list[str]:
    """The verdict on the recommended configuration, then the run's calibration."""
    rec, cal = report.recommended, report.calibration
    lines = ["", "## The recommended configuration against the separate models", ""]
    if rec is None:
        why = [n.text for n in report.summary.notes if LAUNCH in n.about]
        return lines + [f"Not measured: {'; '.join(why)}."]
    later = f"; added later: {rec.added_later_text}" if rec.added_later else ""
    lines += [f"`{rec.bundle}` (the shared trunk{later}) against `{rec.versus}`. Each "
              "latency ratio is paired timing: both sides in one process, alternating blocks; "
              "the estimate and its 95% interval (Hodges-Lehmann, Wilcoxon); *level* when the "
              "interval lies within 1.00 ± 3%, *faster* or *slower* only when it excludes that "
              "band (docs/benchmarking.md). Below 1x the bundle is smaller or faster.", "",
              "| measure | value [95%] | reads |", "|---|---:|---|"]
    lines += [f"| {what} | {value} | {reads} |" for what, value, reads in verdict_rows(rec)]
    if cal is not None:
        lines += ["", "**Calibration** (pairs whose true ratio is 1.00): "
                  + ("**noisy run**: " + "; ".join(cal.why) if cal.noisy else "steady")
                  + (f"; not measured: {', '.join(cal.not_measured)}"
                     if cal.not_measured else "") + "."]
        if cal.timing_plan is not None:
            lines += ["", timing_plan_line(cal.timing_plan) + "."]
        lines += ["", "| pair | value [95%] | |", "|---|---:|---|"]
        lines += [f"| {what} | {value} | {reads} |" for what, value, reads in
                  calibration_rows(cal)]
    return lines


def _reference(report: Report) -> list[str]:
    """The paper's all-layer PALs against their targets, or what a bundle of them would show."""
    s, targets = report.summary, report.targets
    lines = ["", "## The paper's reference: all-layer PALs against their targets", ""]
    notes = s.notes
    if all(t.value is None for t in targets.values()):
        # one paragraph for what an all-layer PAL bundle would measure; the targets that need
        # something else keep their own notes below
        notes = [n for n in notes if n.kind != NoteKind.UNMEASURED]
        wanting = [key for key in targets if not any(key in n.about for n in notes)]
        lines.append("No all-layer PAL bundle with latency results was benched; bench "
                     "`bundles/pals` beside the others to measure "
                     + ", ".join(f"`{key}` ({targets[key].target})" for key in wanting) + ".")
    else:
        lines += ["| measure | value | target | met | from |", "|---|---:|---|---|---|"]
        for key, t in targets.items():
            met = {True: "yes", False: "**missed**", None: "not measured"}[t.met]
            src = ", ".join(f"`{i}`" for i in s.sources.get(key, [])) or \
                ("from the two accuracy averages" if key.startswith("accuracy_gap") else "")
            what = f"{t.what} ({t.context})" if t.context else t.what
            interval = (s.intervals or {}).get(key)
            value = fmt(t.value, 3) + (f" [{interval[0]:.3f}, {interval[1]:.3f}]"
                                       if interval else "")
            lines.append(f"| {what} (`{key}`) | {value} | {t.target} | {met} | {src} |")
        for key in ("accuracy_avg_pal_int8", "accuracy_avg_separate_fp32"):
            sources = ", ".join(f"`{i}`" for i in s.sources.get(key, []))
            lines.append(f"| `{key}` | {fmt(s.values.get(key), 2)} | — | — | {sources} |")
        missed = [k for k, t in targets.items() if t.met is False]
        lines += ["", f"Missed targets: {', '.join(missed) if missed else 'none'}."]
    lines += ["", "Notes:", ""] + [f"- {n.text}" for n in notes]
    lines += [f"- bench: {n}" for n in report.host_notes]
    return lines


def _sizes(bench: BenchFile, label: str) -> list[str]:
    lines = ["", f"## Size on disk ({label})", "",
             "| subject | runtime | precision | trunk MiB | adapters (KiB) | total MiB |",
             "|---|---|---|---:|---|---:|"]
    for sub in bench.subjects.values():
        b = sub.sizes
        trunk = (fmt(b.trunk_bytes / MiB) if b.trunk_bytes is not None else
                 "per model: " + ", ".join(f"{t} {v / MiB:.1f}"
                                           for t, v in b.trunk_bytes_per_model.items())
                 if b.trunk_bytes_per_model else "—")
        adapters = ", ".join(f"{t} {v / 1024:.0f}" for t, v in b.adapter_bytes.items()) or \
            ", ".join(f"{t} model {v / MiB:.1f} MiB" for t, v in b.per_model_bytes.items())
        lines.append(f"| {sub.label} | {sub.runtime} | {sub.precision} | "
                     f"{trunk} | {adapters} | {fmt((b.total_bytes or 0) / MiB)} |")
    return lines


def _latency(bench: BenchFile, label: str) -> list[str]:
    rounds = (f"interleaved rounds of {bench.block} calls each, the first untimed"
              if bench.block > 1 else "interleaved rounds")
    median = (f"; p50 and p90 are medians over {bench.rounds} such processes"
              if bench.rounds > 1 else "")
    lines = ["", f"## Latency ({label}, batch 1, fresh process per subject/threads/length, "
             f"its configurations timed in {rounds}{median})", "",
             "| subject | config | threads | tokens | p50 ms | p90 ms | runs | note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for row in bench.results:
        note = row.error or ("tasks run one after the other"
                             if row.all_tasks_mode == "sequential" else "")
        subject = bench.subjects.get(row.subject or "")
        lines.append(f"| {subject.label if subject else row.subject} | {row.config} | "
                     f"{row.threads} | {row.seq_len} | {fmt(row.p50_ms)} | {fmt(row.p90_ms)} | "
                     f"{row.runs} | {note} |")
    return lines


def _load(bench: BenchFile, label: str) -> list[str]:
    lines = ["", f"## Load, swap and memory ({label})", "",
             "| subject | cold load ms | load + 1st result ms | swap ms | RSS model, one task MiB | "
             "all tasks, task programs MiB | all tasks, all-tasks program MiB | all / one |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for sub in bench.subjects.values():
        one, every = sub.memory.get("model_one_task"), sub.memory.get("model_all_tasks")
        program = sub.memory.get("model_all_tasks_program")
        lines.append(f"| {sub.label} | {fmt(sub.load_ms)} | {fmt(sub.first_result_ms)} | "
                     f"{fmt(sub.swap_ms)} | {fmt(one / MiB if one else None)} | "
                     f"{fmt(every / MiB if every else None)} | "
                     f"{fmt(program / MiB if program else None)} | "
                     f"{fmt(ratio(program or every, one))} |")
    return lines


def _ceiling(report: Report, bench: BenchFile, label: str) -> list[str]:
    if not bench.ceiling:
        return []
    lines = ["", f"## The machine's ceiling ({label})", "",
             "| threads | fp32 GFLOP/s (best) | int8 GOP/s (best) |", "|---:|---:|---:|"]
    for n, c in sorted(bench.ceiling.items()):
        lines.append(f"| {n} | {fmt(c.fp32_gflops_best, 1)} | {fmt(c.int8_gops_best, 1)} |")
    lines += ["", "Fraction of the ceiling each configuration reaches (matmul FLOPs of one "
              "inference / p50; int8 subjects against the int8 ceiling):", "",
              "| subject | config | threads | tokens | GFLOP | achieved GFLOP/s | fraction |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for c in report.ceiling_fraction:
        if c.bench_file == bench.path:
            lines.append(f"| {c.subject} | {c.config} | {c.threads} | {c.seq_len} | "
                         f"{c.matmul_gflop:.3f} | {c.achieved_gflops:.1f} | "
                         f"{fmt(c.fraction, 3)} |")
    return lines


def _accuracy(bench: BenchFile) -> list[str]:
    if not bench.accuracy:
        return []
    lines = ["", "## Accuracy (points; exported artifacts as the runtime runs them, "
             "fp32 runs in PyTorch)", "", "| model | split | avg | per task |", "|---|---|---:|---|"]
    for name, entry in bench.accuracy.items():
        for split, scores in entry.splits.items():
            detail = ", ".join(f"{k} {v * 100:.1f}" for k, v in scores.metrics.items()
                               if isinstance(v, float) and k != "avg")
            avg = scores.metrics.get("avg")
            lines.append(f"| {name} | {split} | {fmt(avg * 100 if avg is not None else None)} "
                         f"| {detail} |")
    return lines


def _texts_together(bench: BenchFile) -> list[str]:
    """Tasks scored together on the same texts (an assistant's intent and slots): each task's
    own metric (a set task's exact-set accuracy, a tagging task's span F1) and the share of
    texts with every one right, per model and split; published figures for the same tasks."""
    groups = list(dict.fromkeys(k for entry in bench.accuracy.values()
                                for scores in entry.splits.values()
                                for k in scores.metrics if k.endswith(SENTENCE_SUFFIX)))
    lines: list[str] = []
    for key in groups:
        tasks = key[: -len(SENTENCE_SUFFIX)].split("+")
        columns = [own_metric(t, bench) for t in tasks]
        lines += ["", f"## {' and '.join(tasks)} on the same texts (points)", "",
                  "| model | split | " + " | ".join(columns) + " | all right (sentence) |",
                  "|---|---|" + "---:|" * (len(columns) + 1)]
        for name, entry in bench.accuracy.items():
            for split, scores in entry.splits.items():
                if key in scores.metrics:
                    values = [scores.metrics.get(c) for c in [*columns, key]]
                    lines.append(f"| {name} | {split} | " + " | ".join(
                        fmt(v * 100 if v is not None else None, 1) for v in values) + " |")
        for ref in PUBLISHED:
            if key in ref.scores:
                lines.append(f"| {ref.name} | test | " + " | ".join(
                    fmt(ref.scores.get(c), 1) for c in [*columns, key]) + " |")
                lines += ["", f"{ref.name}: {ref.note} (as published; palkit's rows score "
                          "its own test file)."]
    return lines


def own_metric(task: str, bench: BenchFile) -> str:
    """A set task's exact-set accuracy key, or a tagging task's span F1 key, as scored."""
    keys = {k for entry in bench.accuracy.values() for scores in entry.splits.values()
            for k in scores.metrics}
    return f"{task}_acc" if f"{task}_acc" in keys else f"{task}_f1"


def _architectures(bench: BenchFile) -> list[str]:
    """`palkit verify-arch`'s records that bench found in its bundles' verify.json."""
    lines: list[str] = []
    for sub in bench.subjects.values():
        for record in map(cpu_record, sub.architectures):
            lines += ["", f"## int8 on {record['arch']} {record['cpu']} ({record['cpu_int8']}): "
                      f"{sub.label} (`palkit verify-arch`, {record.get('date')}, "
                      f"verified on {record.get('verifying_machine')}; accuracy, not speed)", "",
                      architecture_table(record)]
    return lines


def _pairwise(report: Report) -> list[str]:
    lines = ["", "## PAL bundle / each other configuration, pair by pair (host)", "",
             "| PAL | vs | size ratio | latency ratios (p50) |", "|---|---|---:|---|"]
    for p in report.pairwise:
        lat = ", ".join(f"{k}: {v:.2f}" for k, v in p.latency.items())
        lines.append(f"| {p.pal} | {p.other} | {fmt(p.size_ratio, 3)} | {lat} |")
    return lines


def _device(device: DeviceFile) -> list[str]:
    lines = ["", f"## {device.machine.label}", "", f"From `{device.path}` (the Android app).",
             "", "| runtime | config | threads | tokens | p50 ms | p90 ms | runs |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for row in device.results:
        lines.append(f"| {row.runtime} | {row.config} | {row.threads} | {row.seq_len} | "
                     f"{fmt(row.p50_ms)} | {fmt(row.p90_ms)} | {row.runs} |")
    figures = (("bundle", "bundle {}", str), ("load_ms", "load ms, {}", fmt),
               ("swap_ms", "swap ms, {}", lambda v: v if isinstance(v, dict) else fmt(v)),
               ("memory_rss_bytes", "RSS {}, MiB", lambda v: fmt(v / MiB)))
    return lines + ["", "| figure | value |", "|---|---:|"] + [
        f"| {name.format(k)} | {show(v)} |" for key, name, show in figures
        for k, v in device.figures.get(key, {}).items()]


def _frontier(report: Report) -> list[str]:
    deployment = report.frontier
    if not deployment:
        return []
    rec = deployment.recommendation
    lines = ["", "## Which configuration to ship", "",
             f"- **All tasks on every input: {rec.all_tasks or '—'}.**",
             f"- **One task at a time: {rec.one_task or '—'}.**",
             f"- Best PAL placement: {rec.best_placement or '—'} (all tasks / one task "
             f"{fmt(rec.all_tasks_ratio_best_placement)}, accuracy vs all-layer PALs "
             f"{fmt(rec.best_placement_accuracy_gap)} points).", ""]
    lines += [f"From `{deployment.accuracy_file}`; " + "; ".join(n.text for n in rec.notes) + "."]
    sd = deployment.accuracy_sd_points
    if sd is not None:
        lines += ["", f"Seed-to-seed standard deviation of the dev average in that study: about "
                  f"{sd:.1f} points, on top of the dev sets' own sampling error; read small "
                  "accuracy differences as ties."]
    lines += ["", "| configuration | accuracy | task-specific MiB | bundle MiB | one task ms, "
              "ExecuTorch | one task ms, ONNX Runtime | all tasks ms | all / one |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in deployment.points:
        def mib(v: float | None) -> str:
            return fmt(v / MiB if v is not None else None)
        lines.append(f"| {p.name} | {p.accuracy:.1f} ({p.split}) | "
                     f"{mib(p.task_specific_bytes)} | {mib(p.bundle_bytes)} | "
                     f"{fmt(p.one_task_ms.get('executorch'), 1)} | "
                     f"{fmt(p.one_task_ms.get('onnxruntime'), 1)} | "
                     f"{fmt(p.all_tasks_ms, 1)} | {fmt(p.all_tasks_ratio)} |")
    return lines
