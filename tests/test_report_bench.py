"""`cli.py report`: schema, traceable headline numbers, charts, labels and one-line errors."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from palkit.bench.schema import BenchFileError, load_bench_file, percentile, validate
from palkit.report.build import build_report
from palkit.report.paper_reference import SUMMARY_KEYS
from palkit.report.ingest import ReportError
from testing_utils import REPO, host_bench, png_size

DEVICE = {"schema": "palkit-bench", "version": 1,
          "machine": {"kind": "android", "manufacturer": "Google", "model": "Pixel 8",
                      "android_version": "14", "abi": "arm64-v8a"},
          "bundle": {"onnxruntime_bytes": 23_000_000},
          "results": [{"runtime": "onnxruntime", "config": "task:sst", "threads": 4,
                       "seq_len": 128, "p50_ms": 9.5, "p90_ms": 11.0, "runs": 50},
                      {"runtime": "executorch", "config": "all_tasks", "threads": 4,
                       "seq_len": 128, "p50_ms": 21.0, "p90_ms": 24.0, "runs": 50}],
          "load_ms": {"onnxruntime": 120.5}, "swap_ms": {"onnxruntime": 1.5},
          "memory_rss_bytes": {"after_load_onnxruntime": 60_000_000}}


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    host, dev = tmp_path / "host.json", tmp_path / "pixel.json"
    host.write_text(json.dumps(host_bench(tmp_path)))
    dev.write_text(json.dumps(DEVICE))
    return host, dev


def test_percentile_matches_the_apps_interpolation():
    assert percentile([5, 1, 4, 2, 3], 50) == 3.0
    assert math.isclose(percentile([5, 1, 4, 2, 3], 90), 4.6)
    assert percentile([7], 90) == 7


def test_report_headline_numbers_are_right_and_traceable(inputs, tmp_path: Path):
    host, dev = inputs
    out, summary_path = tmp_path / "reports" / "r1", tmp_path / "reports" / "summary.json"
    report = build_report([host], [dev], out, summary_path)
    summary = json.loads(summary_path.read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["machine"].startswith("host CPU: Test CPU 9000")
    assert math.isclose(summary["size_ratio_vs_three_separate"], 23_200_000 / 66_300_000)
    assert math.isclose(summary["size_ratio_vs_one_separate"], 23_200_000 / 22_100_000)
    assert math.isclose(summary["latency_ratio_pal_vs_plain"], 13.0 / 12.0)
    assert math.isclose(summary["latency_ratio_pal_vs_best_peer"], 13.0 / 14.8)
    assert math.isclose(summary["all_tasks_ratio_all_layers"], 28.0 / 13.0)
    assert math.isclose(summary["all_tasks_ratio_top_half"], 20.0 / 12.5)
    assert summary["swap_ms"] == 4.0
    assert math.isclose(summary["memory_ratio_all_vs_one"], 33 / 30)
    # the fake rows give all tasks the same FLOPs as one: the floor is said next to the ratio
    assert any(n.startswith("all_tasks_ratio_all_layers: all tasks take 1.00x") for n in summary["notes"])
    assert math.isclose(summary["accuracy_avg_pal_int8"], 69.0)
    assert math.isclose(summary["accuracy_avg_separate_fp32"], 69.8)
    assert math.isclose(summary["accuracy_drop_int8_vs_fp32"], 0.4)
    # every headline number cites measurements that exist in report.json, with those values
    saved = json.loads((out / "report.json").read_text())
    for key in SUMMARY_KEYS:
        if isinstance(summary[key], (int, float)):
            ids = summary["sources"][key]
            assert ids and all(i in saved["measurements"] for i in ids), key
    assert saved["measurements"][summary["sources"]["swap_ms"][0]]["value"] == 4.0
    assert report.targets["all_tasks_ratio_top_half"].met is True


def test_memory_ratio_prefers_the_all_tasks_program(tmp_path: Path):
    data = host_bench(tmp_path)
    data["subjects"]["pal/executorch"]["memory_rss_bytes"]["model_all_tasks_program"] = 31_500_000
    host = tmp_path / "host.json"
    host.write_text(json.dumps(data))
    build_report([host], [], tmp_path / "r", tmp_path / "summary.json")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert math.isclose(summary["memory_ratio_all_vs_one"], 31.5 / 30)
    assert summary["sources"]["memory_ratio_all_vs_one"][0].endswith(
        "memory:pal/executorch:model_all_tasks_program")
    assert f"| {31_500_000 / 2**20:.2f} | 1.05 |" in (tmp_path / "r" / "report.md").read_text()


def test_report_targets_and_charts_and_labels(inputs, tmp_path: Path):
    host, dev = inputs
    out = tmp_path / "r2"
    report = build_report([host], [dev], out)
    targets = report.targets
    assert targets["size_ratio_vs_one_separate"].met is True       # 1.05 <= 1.10
    assert targets["all_tasks_ratio_all_layers"].met is True        # 2.15 <= 2.2
    assert targets["latency_ratio_pal_vs_plain"].met is False       # 1.083 > 1.05
    assert targets["all_tasks_vs_flop_floor"].value == pytest.approx(28.0 / 13.0)  # floor 1.00
    assert targets["accuracy_gap_pal_int8_vs_separate_fp32"].met is True  # -0.8 >= -1
    saved = json.loads((out / "report.json").read_text())
    assert saved["charts"] == {"headline": "headline.png", "accuracy_vs_size": "accuracy_vs_size.png"}
    for name in saved["charts"].values():
        width, height = png_size(out / name)
        assert 800 <= width <= 1600 and 400 <= height <= 1000, (name, width, height)
    md = (out / "report.md").read_text()
    assert "![headline](headline.png)" in md and "![accuracy_vs_size](accuracy_vs_size.png)" in md
    assert "phone: Google Pixel 8 (Android 14, arm64-v8a)" in md
    assert "host CPU: Test CPU 9000" in md
    assert "## phone: Google Pixel 8" in md
    # this bench timed no pairs: its headline chart's latencies say they are unpaired
    assert "single-round p50s, not paired" in md
    dev_items = {k: v for k, v in saved["measurements"].items() if k.startswith("device:")}
    assert dev_items and all("Pixel 8" in v["machine"] for v in dev_items.values())
    host_items = [v for k, v in saved["measurements"].items() if not k.startswith("device:")]
    assert host_items and all(v["machine"].startswith("host CPU:") for v in host_items)
    assert {"Test CPU 9000" in m["label"] or "Pixel 8" in m["label"] for m in saved["machines"]} == {True}
    assert any(c["fraction"] for c in saved["ceiling_fraction"])


def _ingested(data: dict):
    from palkit.report.ingest import measure_host, parse_bench
    from palkit.report.model import Measurements

    bench, m = parse_bench(data, "host.json"), Measurements()
    measure_host(bench, m)
    return bench, m


def test_a_bundle_comes_from_the_deepest_run_holding_all_its_models(tmp_path: Path):
    """One rule for which --run a bundle's models came from (its budget, its fp32 reference, its
    chart family): the deepest run folder that holds every model folder of the bundle."""
    from palkit.report.selection import source_run

    data = host_bench(tmp_path)
    pals = data["accuracy"]["fp32:pals"]
    data["accuracy"]["fp32:runs"] = {**pals, "run": str(tmp_path / "runs"), "optimizer_steps": 9}
    bench, _ = _ingested(data)
    assert source_run(bench, bench.subjects["pal/executorch"]) == "fp32:pals"   # not runs/
    data["accuracy"].pop("fp32:pals")
    bench, _ = _ingested(data)
    assert source_run(bench, bench.subjects["pal/executorch"]) == "fp32:runs"
    data["subjects"]["pal/executorch"]["fp32_model_dirs"] = {"sst": str(tmp_path / "elsewhere")}
    bench, _ = _ingested(data)
    assert source_run(bench, bench.subjects["pal/executorch"]) is None


def test_unpaired_figure_rows_carry_the_targets(tmp_path: Path):
    from palkit.report.p50_chart import p50_rows

    rows = {r.label: r for r in p50_rows(*_ingested(host_bench(tmp_path)))}
    assert [r.role for r in rows.values()] == ["pal", "pal", "separate", "peer", "peer"]
    pal, top = rows["pal (executorch, int8)"], rows["top (executorch, int8)"]
    assert math.isclose(pal.mib, 23_200_000 / 2**20) and pal.one_ms == 13.0 and pal.all_ms == 28.0
    assert math.isclose(pal.size_target, 0.40 * 66_300_000 / 2**20)  # three separate models
    assert math.isclose(pal.one_target, 1.05 * 12.0)                   # plain, same runtime
    assert math.isclose(pal.all_target, 2.2 * 13.0) and math.isclose(top.all_target, 1.7 * 12.5)
    assert pal.all_program and rows["PyTorch eager fp32"].all_target is None


def test_size_target_is_checked_not_asserted(inputs, tmp_path: Path):
    host, _ = inputs
    report = build_report([host], [], tmp_path / "r3")
    t = report.targets["size_ratio_vs_three_separate"]
    assert t.met is True and math.isclose(t.value, 23.2 / 66.3)


def test_placements_come_from_layer_indices_and_only_all_layers_is_the_headline(tmp_path: Path):
    """A bundle with PALs in the top layer only, or in layers 3,4,5, is never the all-layer PAL
    headline, however it is named; 3,4,5 of a 6-layer trunk is its top half."""
    data = host_bench(tmp_path)
    data["subjects"]["pal/executorch"]["pal_layers"] = [5]                 # top-1
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    report = build_report([path], [], tmp_path / "r", tmp_path / "s.json")
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["latency_ratio_pal_vs_plain"] is None
    assert summary["all_tasks_ratio_all_layers"] is None
    assert math.isclose(summary["all_tasks_ratio_top_half"], 20.0 / 12.5)
    assert any(n.startswith("no all-layer PAL bundle") and "pal/executorch (placement top-1)" in n
               and "pal-top/executorch (placement top)" in n for n in summary["notes"])
    assert report.targets["latency_ratio_pal_vs_plain"].met is None


def test_report_says_the_flop_floor_and_unequal_budgets_beside_their_targets(inputs,
                                                                             tmp_path: Path):
    host, _ = inputs
    report = build_report([host], [], tmp_path / "r")
    gap = report.targets["accuracy_gap_pal_int8_vs_separate_fp32"]
    assert gap.context == ("unequal budgets: the joint run took 400 optimizer steps for all "
                           "its tasks, the separate models 1,200 in all")
    floor = report.targets["latency_ratio_pal_vs_plain"].context
    assert floor.startswith("its matrix-multiply FLOP floor is ")
    md = (tmp_path / "r" / "report.md").read_text()
    assert gap.context in md and floor in md


def test_missed_target_and_missing_parts_are_said(tmp_path: Path):
    data = host_bench(tmp_path)
    data["subjects"]["pal/executorch"]["swap_ms"]["executorch"] = 25.0
    del data["subjects"]["pal-top/executorch"]
    data["results"] = [r for r in data["results"] if r["subject"] != "pal-top/executorch"]
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    report = build_report([path], [], tmp_path / "r4", tmp_path / "s.json")
    assert report.targets["swap_ms"].met is False
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["all_tasks_ratio_top_half"] is None
    assert any(n.startswith("all_tasks_ratio_top_half") for n in summary["notes"])
    assert "**missed**" in (tmp_path / "r4" / "report.md").read_text()


def test_report_command_says_on_the_terminal_what_was_not_measured(tmp_path: Path, capsys):
    """A row left empty is named on stderr with its reason, and the bench's notes (which name
    the command that fills the gap) are repeated there, not only in report.md."""
    from palkit.cli import main

    data = host_bench(tmp_path)
    del data["subjects"]["pal-top/executorch"]
    data["results"] = [r for r in data["results"] if r["subject"] != "pal-top/executorch"]
    data["notes"] = ["no separately fine-tuned models among --run: run `palkit train --mode "
                     "separate --out runs/separate`"]
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    assert main(["report", "--bench", str(path), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "not measured: all_tasks_ratio_top_half: no top-half PAL bundle" in err, err
    assert "bench note: no separately fine-tuned models among --run: run `palkit train" in err


@pytest.mark.parametrize("content, words", [
    (None, "not found"),
    ("{not json", "not valid JSON"),
    (json.dumps({"schema": "other", "version": 1}), "schema"),
    (json.dumps({**DEVICE, "results": [{"runtime": "ort"}]}), "results[0] lacks"),
    (json.dumps({**DEVICE, "machine": {"kind": "android"}}), "machine.model"),
])
def test_bad_bench_files_fail_in_one_line_naming_the_file(tmp_path: Path, content, words):
    path = tmp_path / "phone-results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(BenchFileError) as e:
        build_report([], [path], tmp_path / "out")
    msg = str(e.value)
    assert str(path) in msg and words in msg and "\n" not in msg


def test_cli_prints_the_error_and_exits_2(tmp_path: Path, capsys):
    from palkit.cli import main

    status = main(["report", "--device-results", str(tmp_path / "nope.json"),
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err == f"error: {tmp_path / 'nope.json'}: benchmark file not found", err


def test_device_file_given_as_host_and_host_as_device(inputs, tmp_path: Path):
    host, dev = inputs
    with pytest.raises(ReportError, match="host.json"):
        build_report([], [host], tmp_path / "o")
    report = build_report([dev], [], tmp_path / "o2")  # a phone file under --bench is fine
    assert report.summary.machine is None
    assert report.charts == [] and "## At a glance" not in (tmp_path / "o2" / "report.md").read_text()


def test_schema_accepts_the_apps_file_and_a_host_file(tmp_path: Path):
    validate(DEVICE)
    validate(host_bench(tmp_path))
    bad = host_bench(tmp_path)
    bad["results"][0]["subject"] = "ghost"
    with pytest.raises(ValueError, match="ghost"):
        validate(bad)
    path = tmp_path / "d.json"
    path.write_text(json.dumps(DEVICE))
    assert load_bench_file(path)["machine"]["model"] == "Pixel 8"


def test_one_task_ratio_is_given_against_its_flop_floor(tmp_path: Path):
    data = host_bench(tmp_path)
    for row in data["results"]:
        if row["subject"] == "pal/executorch" and row["config"].startswith("task:"):
            row["matmul_flops"] = int(row["matmul_flops"] * 1.08)   # the PALs' own matmuls
    (tmp_path / "host.json").write_text(json.dumps(data))
    report = build_report([tmp_path / "host.json"], [], tmp_path / "r")
    assert report.summary.values["latency_ratio_pal_vs_plain"] == pytest.approx(13.0 / 12.0)
    assert ("latency_ratio_pal_vs_plain: one PAL task takes 1.080x the plain classifier's "
            "matrix-multiply FLOPs, the floor of this ratio when inference is compute-bound"
            in [n.text for n in report.summary.notes])


@pytest.mark.parametrize("argv0", ["/home/me/.venv/bin/palkit", "cli.py", "/src/palkit/cli.py"])
def test_bench_file_records_the_command_however_it_was_typed(monkeypatch, argv0):
    from palkit.bench.run import command_line
    monkeypatch.setattr("sys.argv", [argv0, "bench", "runs/default", "--out", "b.json"])
    assert command_line() == ["palkit", "bench", "runs/default", "--out", "b.json"]
    monkeypatch.setattr("sys.argv", ["/usr/lib/python3/site-packages/pytest/__main__.py"])
    assert command_line() is None


def _one_bundle(tmp_path: Path, int8: float, fp32: float) -> dict:
    """What the Quickstart benches: one PAL bundle and its own run, no peers or separate models."""
    data = host_bench(tmp_path)
    data["subjects"] = {"pal/executorch": data["subjects"]["pal/executorch"]}
    data["results"] = [r for r in data["results"] if r["subject"] == "pal/executorch"]
    data["accuracy"] = {"pal/executorch": {"dev": {"avg": int8}},
                        "fp32:pals": {**data["accuracy"]["fp32:pals"], "dev": {"avg": fp32}}}
    del data["accuracy"]["fp32:pals"]["test"]
    return data


def test_accuracy_axis_spans_at_least_a_point_either_side(tmp_path: Path):
    """A 0.14-point int8 gap must look small: the axis never zooms in to fill the chart."""
    from dataclasses import replace

    from palkit.report.charts import ACCURACY_PAD_POINTS, accuracy_points, draw_accuracy

    bench, m = _ingested(_one_bundle(tmp_path, 0.6925, 0.6939))
    points, lines = accuracy_points(bench, m)
    assert [p.acc for p in points] == [pytest.approx(69.25)]
    fig = draw_accuracy(points, lines, bench)
    low, high = fig.axes[0].get_ylim()
    assert low == pytest.approx(69.25 - ACCURACY_PAD_POINTS)
    assert high == pytest.approx(69.39 + ACCURACY_PAD_POINTS)
    # a wide spread keeps its own small margin instead
    points.append(replace(points[0], acc=50.0))
    low, high = draw_accuracy(points, lines, bench).axes[0].get_ylim()
    assert 48.0 < low < 50.0 and 69.39 < high < 71.0


@pytest.mark.parametrize("with_peers", [False, True])
def test_unpaired_legend_and_labels_show_only_what_is_drawn(tmp_path: Path, with_peers):
    from palkit.report.p50_chart import draw_p50, p50_rows

    bench, m = _ingested(host_bench(tmp_path) if with_peers
                         else _one_bundle(tmp_path, 0.69, 0.70))
    fig = draw_p50(p50_rows(bench, m), bench)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert ("target: fastest peer" in legend) == with_peers
    assert ("peer: separate models" in legend) == with_peers
    assert "tasks run one after the other" not in legend   # every subject here has a program
    assert [ax.get_title() for ax in fig.axes][1:] == ["one task, p50 (unpaired)",
                                                       "all tasks on one input, p50 (unpaired)"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for text in ax.texts:           # each bar's value ends inside its panel
            end = text.get_window_extent(renderer)
            assert box.x0 <= end.x0 and end.x1 <= box.x1, (ax.get_title(), text.get_text())


def _pair(kind: str, num: str, den: str, ratio: float, interval: list[float]) -> dict:
    side = lambda s: dict(zip(("subject", "config"), s.split(" ")))  # noqa: E731
    return {"id": f"pair:{kind}:{num}/{den}", "kind": kind, "num": side(num), "den": side(den),
            "what": f"{num} / {den}", "threads": 1, "seq_len": 128, "ratio": ratio,
            "interval": interval, "pairs": 30}


def _paired_bench(tmp_path: Path) -> dict:
    """host_bench with the pairs the bench times: its p50s say one PAL task is 13.0 / 12.0 ms
    against the separate model, its paired timing 1.40x."""
    data = host_bench(tmp_path)
    pal, sep = "pal/executorch", "separate/executorch/int8"
    data["pairs"] = [_pair("aa", f"{sep} task:sst", f"{sep} task:sst", 1.004, [0.99, 1.02]),
                     _pair("one_task", f"{pal} task:sst", f"{sep} task:sst", 1.40, [1.39, 1.41]),
                     _pair("all_tasks", f"{pal} all_tasks", f"{sep} all_tasks", 1.22, [1.2, 1.24]),
                     _pair("all_vs_one", f"{pal} all_tasks", f"{pal} task:sst", 2.7, [2.6, 2.8]),
                     _pair("peer", f"{pal} task:sst", "peer/ort-int8 task:sst", 0.99, [0.95, 1.2])]
    return data


def test_the_headline_figure_draws_the_paired_ratios_the_verdict_quotes(tmp_path: Path):
    from palkit.report.verdict_chart import draw_verdict, ratio_groups

    bench, _ = _ingested(_paired_bench(tmp_path))
    groups = ratio_groups(bench, None)
    assert [g.bundle for g in groups] == ["pal/executorch", None]      # then the calibration
    rows = {r.label: r for r in groups[0].rows}
    one = rows["one task / separate model"]
    assert (one.ratio, one.interval, one.reads, one.target) == (1.40, (1.39, 1.41), "slower", 1.05)
    assert rows["all tasks on one input / one task"].target == 2.2
    assert rows["one task / peer/ort-int8"].reads == "not resolved"
    assert [r.label for r in groups[1].rows] == ["A/A: separate/executorch/int8"]
    host = tmp_path / "host.json"
    host.write_text(json.dumps(_paired_bench(tmp_path)))
    build_report([host], [], tmp_path / "r")
    width, height = png_size(tmp_path / "r" / "headline.png")
    assert width == 1600 and 400 <= height <= 1000
    md = (tmp_path / "r" / "report.md").read_text()
    assert "each time ratio the bench timed in pairs, with its 95% interval" in md
    fig = draw_verdict(groups, [], bench)
    ratios = fig.axes[0]
    assert ratios.get_xscale() == "log"
    labels = [t.get_text() for t in ratios.get_yticklabels()]
    assert labels[0] == "one task / separate model" and labels[-1].startswith("A/A: ")
    assert "1.40x [1.39, 1.41] slower" in [t.get_text() for t in fig.axes[1].texts]


@pytest.mark.parametrize("stopped, words", [
    ("resolved", "Timing plan: 7 processes x 6 pairs, stopped: resolved (+-3%) after 212 s."),
    ("time cap", "Timing plan: 9 processes x 6 pairs, stopped at the 300 s cap: not every ratio "
                 "resolved (+-3%)."),
    (None, None)])
def test_the_bench_timing_plan_is_said_under_the_calibration(tmp_path: Path, capsys, stopped,
                                                             words):
    from palkit.cli import main

    data = _paired_bench(tmp_path)
    if stopped:
        data["timing_plan"] = {"processes": 7 if stopped == "resolved" else 9, "pairs": 6,
                               "block": 4, "min_processes": 5, "max_processes": 30,
                               "max_seconds": 300.0,
                               "target_halfwidth": math.log(1.03), "stopped": stopped,
                               "seconds": 212.4 if stopped == "resolved" else 301.0}
    data["subjects"]["pal/executorch"]["pal_layers"] = []     # the launch bundle: no PALs
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    assert main(["report", "--bench", str(path), "--out", str(tmp_path / "r"),
                 "--summary", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    md = (tmp_path / "r" / "report.md").read_text()
    calibration = json.loads((tmp_path / "s.json").read_text())["calibration"]
    if words is None:       # a bench file from before the timing plan: nothing more is said
        assert "Timing plan" not in md and "Timing plan" not in out
        assert "timing_plan" not in calibration
        return
    assert words in md and words.rstrip(".") in out
    assert md.index("**Calibration**") < md.index(words) < md.index("| pair |")
    assert calibration["timing_plan"]["stopped"] == stopped


def test_report_shows_the_int8_check_on_other_cpus_that_bench_found_in_a_bundle(tmp_path: Path):
    """`palkit verify-arch` writes verify.json's architectures; bench carries each runtime's
    part from the bundle to that runtime's subject, and the report prints one row per task
    with the recorded figures and the CPU's int8 features."""
    from palkit.export.arch_records import cpu_checks

    def change(metric, value, low, high):
        return {"metric": metric, "metric_change": value, "metric_change_interval": [low, high]}

    def checked(agreement):
        return {"launcher": "qemu-aarch64-static -cpu cortex-a53 java", "tasks": {"sst": {
            "examples": 150,
            "vs_host_int8": {"agreement": agreement, "agreement_interval": [0.98, 1.0],
                             "max_abs_diff": 4.52e-3},
            "vs_fp32": {"agreement": 0.9867, **change("sst_acc", -0.67, -2.0, 0.67)},
            "host_int8_vs_fp32": change("sst_acc", -0.33, -1.33, 0.67)}}}
    record = {"arch": "aarch64", "cpu": "cortex-a53",
              "cpu_int8": "aarch64, no dot product (ARMv8.0)",
              "verifying_machine": "AMD EPYC (x86-64, AVX2, no VNNI (16-bit pairs))",
              "date": "2026-11-28",
              "runtimes": {"executorch": checked(0.9933), "onnxruntime": checked(0.9867)}}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    assert cpu_checks(bundle, "executorch") == {}           # no verify.json: nothing to show
    (bundle / "verify.json").write_text(json.dumps({"gate": {}, "architectures":
                                                    {"aarch64/cortex-a53": record}}))
    data = host_bench(tmp_path)
    data["subjects"]["pal/executorch"]["architectures"] = cpu_checks(bundle, "executorch")
    path = tmp_path / "h.json"
    path.write_text(json.dumps(data))
    build_report([path], [], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert ("## int8 on aarch64 cortex-a53 (aarch64, no dot product (ARMv8.0)): pal (executorch, "
            "int8) (`palkit verify-arch`, 2026-11-28, verified on AMD EPYC (x86-64, AVX2, no VNNI "
            "(16-bit pairs)); accuracy, not speed)") in md
    assert ("| executorch | sst | 150 | 0.9933 [0.9800, 1.0000] | 4.52e-03 | 0.9867 | sst_acc "
            "-0.67 [-2.00, +0.67] | sst_acc -0.33 [-1.33, +0.67] |") in md
    assert "| onnxruntime | sst | 150 |" not in md          # that part belongs to its own subject
    assert md.count("## int8 on aarch64") == 1              # the other subjects have none


def test_the_committed_bench_with_records_from_before_cpu_models_still_reports(tmp_path: Path):
    """reports/bench-host.json holds verify-arch records of the form before --cpu (ExecuTorch's
    at the top, keyed by architecture): the report reads them as cortex-a76 ExecuTorch rows."""
    committed = REPO / "reports/bench-host.json"
    build_report([committed], [], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert ("## int8 on aarch64 cortex-a76 (aarch64, dot product): shared (executorch, int8) "
            "(`palkit verify-arch`, 2026-11-26, verified on a machine not recorded") in md
    assert "| executorch | quora | 150 |" in md


def test_a_bundle_task_without_the_split_is_left_out_of_the_average_and_said(monkeypatch):
    """CFIMDB has no test split: a bundle holding it is averaged over its other tasks on test
    (as the separate models are), not refused after the timing."""
    from palkit.bench.run import bundle_accuracy
    from palkit.bench.subjects import Subject
    from palkit.export import evaluate

    scores = {"dev": {"sst_acc": 0.4, "cfimdb_acc": 0.8, "sts_pearson": 0.6},
              "test": {"sst_acc": 0.5, "sts_pearson": 0.8}}
    monkeypatch.setattr(evaluate, "evaluate_bundle",
                        lambda bundle, data, split, *rest, keep_predictions: dict(
                            scores[split], avg=0.0, examples={}))
    tasks = {t: {"bundle": "bundles/shared"} for t in ("sst", "sts", "cfimdb")}
    s = Subject("shared/executorch", "pal", "executorch", "int8", "shared", tasks, {}, {}, 30522)
    notes: list[str] = []
    dev = bundle_accuracy(s, Path("data"), "dev", None, notes)
    assert dev["avg"] == pytest.approx((0.4 + 0.8 + 0.8) / 3) and notes == []
    test = bundle_accuracy(s, Path("data"), "test", None, notes)
    assert test["avg"] == pytest.approx((0.5 + 0.9) / 2) and "cfimdb_acc" not in test
    assert notes == ["accuracy of shared/executorch on test: avg over ['sst', 'sts']; "
                     "['cfimdb'] have no test split"]


def test_a_bundle_whose_tasks_were_added_in_another_order_is_timed_by_its_program(
        et_fp32: Path, tmp_path: Path):
    """The all-tasks program lists its tasks grouped by placement; the manifest as they were
    added (export --adapter appends): either way one program runs them all."""
    import shutil

    from palkit.bench.schema import ALL_TASKS
    from palkit.bench.subjects import discover

    bundle = tmp_path / "reordered"
    shutil.copytree(et_fp32, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["tasks"].reverse()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    subjects, _, notes = discover([bundle], [], ["executorch"], [], tmp_path / "work")
    assert [s.all_tasks for s in subjects] == [
        {"format": "bundle", "bundle": str(bundle), "task": ALL_TASKS}], notes


# ---- the verdict's statistics (report/verdict.py on core/stats.py) -----------------------------

def test_the_accuracy_gap_is_paired_over_the_same_examples():
    from palkit.report.model import TaskPredictions
    from palkit.report.verdict import paired_gap

    gold = [0, 1, 1, 0] * 50
    a = {"sst": TaskPredictions(gold[:], gold)}
    b = {"sst": TaskPredictions([1 - g if i % 10 == 0 else g for i, g in enumerate(gold)], gold)}
    gap = paired_gap(a, b)
    assert gap.gap == pytest.approx(10.0) and gap.examples == 200 and gap.tasks == ("sst",)
    low, high = gap.interval
    assert 5 < low < 10 < high < 15
    other = gold[1:] + gold[:1]  # other examples: nothing to pair
    assert paired_gap(a, {"sst": TaskPredictions(other, other)}) is None


def test_the_equal_compute_gap_comes_with_welchs_interval_over_seeds():
    from palkit.report.ingest import SeedStats, Study, StudyRow
    from palkit.report.verdict import equal_compute

    rows = (StudyRow("shared", None, SeedStats(75.75, 3, 0.23)), StudyRow("separate", None, None),
            StudyRow("separate, captured", None, SeedStats(75.9, 3, 0.3)))
    gap = equal_compute(Study("converged.json", "?", rows))
    assert gap.gap == pytest.approx(-0.15)
    assert gap.separate.configuration == "separate, captured"
    # se = sqrt(0.23^2/3 + 0.3^2/3) = 0.218 on about 3.7 degrees of freedom: t(3) = 3.182
    assert gap.interval == pytest.approx((-0.15 - 3.182 * 0.2183, -0.15 + 3.182 * 0.2183),
                                         abs=1e-3)
    assert equal_compute(Study("converged.json", "?", rows[1:])) is None


def test_a_run_without_an_identical_compute_pair_is_uncalibrated_not_noisy(tmp_path: Path):
    from palkit.report.verdict import calibration

    bench, _ = _ingested(_paired_bench(tmp_path))     # its one-task pair is not head-only
    cal = calibration(bench)
    assert not cal.noisy and cal.not_measured == ["identical_compute"]
    assert [c.what for c in cal.pairs] == ["separate/executorch/int8 task:sst / "
                                           "separate/executorch/int8 task:sst"]


def test_the_bootstrap_scores_are_the_trainers_average():
    """paired_gap's vectorised score (for 2,000 resamples) is trainer/metrics.py's average."""
    import random

    import numpy as np
    import torch

    from palkit.report.model import TaskPredictions
    from palkit.report.verdict import _average_score
    from palkit.trainer.metrics import average_score, task_metrics
    from palkit.trainer.tasks import BUILTIN_TASKS

    rng = random.Random(3)
    gold_sst = [rng.randrange(5) for _ in range(300)]
    gold_sts = [rng.uniform(0, 5) for _ in range(200)]
    examples = {"sst": TaskPredictions([g if rng.random() < 0.6 else rng.randrange(5)
                                        for g in gold_sst], gold_sst),
                "sts": TaskPredictions([g + rng.gauss(0, 1) for g in gold_sts], gold_sts)}
    whole = {t: np.arange(len(e.gold))[None] for t, e in examples.items()}
    metrics = {}
    for t, e in examples.items():
        metrics.update(task_metrics(BUILTIN_TASKS[t], torch.tensor(e.pred), torch.tensor(e.gold)))
    expected = 100 * average_score([BUILTIN_TASKS["sst"], BUILTIN_TASKS["sts"]], metrics)
    assert _average_score(examples, ["sst", "sts"], whole)[0] == pytest.approx(expected, abs=1e-4)


def test_report_scores_intent_and_slots_together_beside_the_published_figures(tmp_path: Path):
    """Tasks on the same texts get their own table: each task's own metric (exact-set accuracy,
    span F1) and sentence accuracy, per model and split, and JointBERT's published row."""
    data = _one_bundle(tmp_path, 0.9, 0.91)
    both = {"atis_intent_acc": 0.924, "atis_intent_micro_f1": 0.93, "atis_slots_f1": 0.956,
            "atis_slots_precision": 0.95, "atis_slots_recall": 0.96,
            "atis_intent+atis_slots_sentence_acc": 0.832}
    data["accuracy"]["pal/executorch"]["test"] = {**both, "avg": 0.94}
    out = tmp_path / "r"
    build_report([_write_bench(tmp_path, data)], [], out)
    text = (out / "report.md").read_text()
    table = text.split("## atis_intent and atis_slots on the same texts (points)")[1]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert lines[0] == ("| model | split | atis_intent_acc | atis_slots_f1 "
                        "| all right (sentence) |")
    assert lines[2] == "| pal/executorch | test | 92.4 | 95.6 | 83.2 |"
    assert lines[3] == "| JointBERT (published) | test | 97.5 | 96.1 | 88.2 |"
    assert "full 893-utterance test set" in table
    assert text.count("on the same texts") == 1   # the dev split has no such group


def _write_bench(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "host.json"
    path.write_text(json.dumps(data))
    return path


def test_the_verdicts_accuracy_gap_scores_sets_and_tags_by_their_own_metrics():
    """Exact-set accuracy and span F1 (a ratio of sums, resampled by text), not equality of
    lists: the paired gap's value is the two averages' difference."""
    from palkit.report.model import TaskPredictions
    from palkit.report.verdict import paired_gap

    intents = [["atis_flight"], ["atis_airfare"], ["atis_airfare", "atis_flight"]]
    tags = [["B-toloc", "O"], ["B-toloc", "O"], ["O"]]
    right = {"atis_intent": TaskPredictions(intents, intents),
             "atis_slots": TaskPredictions(tags, tags)}
    wrong = {"atis_intent": TaskPredictions([["atis_flight"], ["atis_flight"],
                                             ["atis_flight", "atis_airfare"]], intents),
             "atis_slots": TaskPredictions([["B-toloc", "O"], ["O", "O"], ["O"]], tags)}
    gap = paired_gap(wrong, right)
    # intents: 2 of 3 sets right (order does not matter); slots: 1 of 2 spans found, 1 predicted
    # (F1 = 2 x 1 / (1 + 2)); average 66.7 against 100
    assert gap.tasks == ("atis_intent", "atis_slots") and gap.examples == 6
    assert gap.gap == pytest.approx(-100 / 3)
    assert gap.interval[0] <= gap.gap <= gap.interval[1]
