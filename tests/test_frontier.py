"""`palkit report --accuracy`: the deployment frontier joins bench subjects named after a study's
configurations with the study's accuracy, and names what to ship from the numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from palkit.report.build import build_report
from palkit.report.ingest import ReportError
from testing_utils import host_bench, png_size

RENAMED = {"pal/executorch": "pals-annealed/executorch", "pal-top/executorch": "pals-top-1/executorch"}


def _row(name: str, dev: float, test: float | None = None) -> dict:
    return {"name": name, "dev_avg": {"mean": dev, "sd": 0.3, "n": 3},
            "test_avg": {"mean": test, "sd": None, "n": 1} if test is not None else None}


def write_inputs(tmp_path: Path, top1_dev: float) -> tuple[Path, Path]:
    text = json.dumps(host_bench(tmp_path))
    for old, new in RENAMED.items():
        text = text.replace(f'"{old}', f'"{new}').replace(f":{old}:", f":{new}:")
    bench = tmp_path / "host.json"
    bench.write_text(text)
    accuracy = tmp_path / "converged.json"
    accuracy.write_text(json.dumps({"rows": [
        _row("pals-annealed", 74.4, 75.4), _row("pals-top-1", top1_dev),
        _row("separate", 74.3), _row("pals-heads-4", 74.7)]}))
    return bench, accuracy


def test_frontier_recommends_from_the_numbers(tmp_path: Path) -> None:
    bench, accuracy = write_inputs(tmp_path, top1_dev=74.0)
    report = build_report([bench], [], tmp_path / "report", tmp_path / "summary.json", accuracy)
    points = {p.name: p for p in report.frontier.points}
    assert set(points) == {"pals-annealed", "pals-top-1", "separate"}   # heads-4 has no bundle
    assert points["pals-annealed"].all_tasks_ratio == pytest.approx(28.0 / 13.0)
    assert points["separate"].all_tasks_ms == pytest.approx(36.0)     # three models in a row
    assert points["separate"].task_specific_bytes == 66_300_000
    assert points["pals-top-1"].task_specific_bytes == 600_000
    assert points["pals-annealed"].split == "dev"   # not every configuration has a test score
    rec = report.frontier.recommendation
    # one task: separate 12.0 ms, top-1 12.5 ms: a tie within 5%, won by top-1's fewer bytes
    assert (rec.all_tasks, rec.one_task, rec.best_placement) == \
        ("pals-top-1", "pals-top-1", "pals-top-1")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["all_tasks_ratio_best_placement"] == pytest.approx(20.0 / 12.5)
    assert summary["best_placement_accuracy_gap"] == pytest.approx(-0.4)
    assert summary["latency_ratio_pal_vs_plain"] is not None   # today's keys stay
    assert any("pals-top-1" in n for n in summary["notes"])
    assert report.targets["all_tasks_ratio_best_placement"].met is False   # 1.6 > 1.5
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "**All tasks on every input: pals-top-1.**" in markdown
    assert "| pals-top-1 | 74.0 (dev) | 0.57 |" in markdown
    assert png_size(tmp_path / "report" / "frontier.png") == (1200, 650)


def test_a_configuration_too_far_below_all_layer_pals_is_not_recommended(tmp_path: Path) -> None:
    bench, accuracy = write_inputs(tmp_path, top1_dev=73.3)    # 1.1 points below 74.4
    report = build_report([bench], [], tmp_path / "report", None, accuracy)
    rec = report.frontier.recommendation
    assert rec.all_tasks == "pals-annealed"        # 28 ms beats separate's 36 ms
    assert rec.best_placement == "pals-annealed"
    assert rec.best_placement_accuracy_gap == 0.0


def test_reference_all_layer_pals_are_the_ones_with_the_trunks_heads() -> None:
    from palkit.report.ingest import parse_bench
    from palkit.report.selection import pal_groups
    every, top = {"pal_layers": list(range(6)), "num_layers": 6}, {"pal_layers": [3, 4, 5],
                                                                    "num_layers": 6}
    subs = {"pals-annealed/executorch": {"role": "pal", "precision": "int8", **every,
                                         "pal_heads": 12},
            "pals-heads-4/executorch": {"role": "pal", "precision": "int8", **every,
                                        "pal_heads": 4},
            "pals-top-3/executorch": {"role": "pal", "precision": "int8", **top,
                                      "pal_heads": 12},
            "pals-top-1/executorch": {"role": "pal", "precision": "int8", "pal_layers": [5],
                                      "num_layers": 6, "pal_heads": 12},
            "shared/executorch": {"role": "pal", "precision": "int8", "pal_layers": [],
                                  "num_layers": 6, "pal_heads": None}}
    bench = parse_bench({"machine": {"kind": "host", "model": "CPU"}, "results": [],
                         "subjects": subs}, "bench.json")
    assert pal_groups(bench.subjects) == (["pals-annealed/executorch"], ["pals-top-3/executorch"])


def test_summary_notes_do_not_call_the_frontier_keys_unmeasured(tmp_path: Path) -> None:
    bench, accuracy = write_inputs(tmp_path, top1_dev=74.0)
    build_report([bench], [], tmp_path / "report", tmp_path / "summary.json", accuracy)
    notes = json.loads((tmp_path / "summary.json").read_text())["notes"]
    assert not [n for n in notes if n.startswith("all_tasks_ratio_best_placement:")]


def _int8_file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "converged-int8.json"
    path.write_text(json.dumps({"machine": "Test CPU", "what": "seed-0 PAL model", "rows": rows}))
    return path


def test_int8_accuracy_file_fills_the_accuracy_keys_a_bench_without_accuracy_left_null(
        tmp_path: Path) -> None:
    bench, accuracy = write_inputs(tmp_path, top1_dev=74.0)
    data = json.loads(bench.read_text())
    del data["accuracy"]                                   # palkit bench --no-accuracy
    bench.write_text(json.dumps(data))
    int8 = _int8_file(tmp_path, [{"runtime": "pytorch", "split": "dev", "avg": 0.747},
                                 {"runtime": "executorch", "split": "dev", "avg": 0.743},
                                 {"runtime": "onnxruntime", "split": "dev", "avg": 0.742},
                                 {"runtime": "executorch", "split": "test", "avg": 0.754}])
    report = build_report([bench], [], tmp_path / "report", tmp_path / "summary.json", accuracy,
                          int8)
    summary = json.loads((tmp_path / "summary.json").read_text())
    # the study's separate models have no test score, so every key is on dev
    assert summary["accuracy_avg_pal_int8"] == pytest.approx(74.3)      # the headline's runtime
    assert summary["accuracy_drop_int8_vs_fp32"] == pytest.approx(0.4)
    assert summary["accuracy_avg_separate_fp32"] == pytest.approx(74.3)
    assert summary["sources"]["accuracy_drop_int8_vs_fp32"] == [
        "study:converged-int8:pytorch:dev:avg", "study:converged-int8:executorch:dev:avg"]
    assert report.targets["accuracy_gap_pal_int8_vs_separate_fp32"].value == pytest.approx(0.0)
    assert report.targets["accuracy_drop_int8_vs_fp32"].met is True
    accuracy_notes = [n for n in summary["notes"] if n.startswith("accuracy_")]
    assert not [n for n in accuracy_notes if "not measured" in n or "not among" in n]
    assert any("converged-int8.json" in n and "dev split" in n for n in accuracy_notes)


def test_int8_accuracy_rows_without_a_runtime_are_refused_by_file(tmp_path: Path) -> None:
    bench, accuracy = write_inputs(tmp_path, top1_dev=74.0)
    int8 = _int8_file(tmp_path, [{"model": "ExecuTorch", "split": "dev", "avg": 0.743}])
    data = json.loads(bench.read_text())
    del data["accuracy"]
    bench.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=r"converged-int8.json: rows\[0\] lacks runtime"):
        build_report([bench], [], tmp_path / "report", None, accuracy, int8)


def _point(name: str, one_ms: float, all_ms: float, mib: float, placement: str = "none"):
    from palkit.report.frontier import ExecutorchCost, FrontierPoint
    return FrontierPoint(name, 74.4, None, "dev", {"executorch": one_ms}, [],
                         ExecutorchCost(mib * 2**20, 0, all_ms, all_ms / one_ms),
                         placement=placement)


def test_latencies_within_five_percent_are_a_tie_won_by_the_smaller_bundle() -> None:
    from palkit.report.recommend import choose_shipping
    points = [_point("pals-annealed", 13.9, 37.9, 23.2, "all"), _point("shared", 11.1, 11.1, 22.2),
              _point("separate", 11.0, 33.3, 66.1)]
    rec = choose_shipping(points, "dev", "128 tokens, 1 thread")
    assert (rec.one_task, rec.all_tasks) == ("shared", "shared")   # 11.1 vs 11.0: a tie
    points[2].one_task_ms["executorch"] = 10.0                     # 11% faster: no tie
    assert choose_shipping(points, "dev", "128 tokens, 1 thread").one_task == "separate"
    assert any("within 5%" in n.text for n in rec.notes)


def test_the_best_placement_is_chosen_by_the_pal_layers_a_bundle_records() -> None:
    """Whatever a configuration is called, a bundle with PALs in its trunk is a placement and
    one without (the shared trunk, however fast) is not."""
    from palkit.report.recommend import choose_shipping
    points = [_point("pals-annealed", 13.9, 37.9, 23.2, "all"), _point("shared", 11.1, 11.1, 22.2),
              _point("last-layer", 12.0, 18.0, 22.8, "top-1")]
    rec = choose_shipping(points, "dev", "128 tokens, 1 thread")
    assert rec.best_placement == "last-layer" and rec.all_tasks_ratio_best_placement == 1.5


def write_later_tasks(tmp_path: Path, head_sts: float) -> Path:
    """A hand-made results/later-tasks.json: three left-out tasks and cfimdb, three adapters,
    two seeds of sst."""
    joint = {"sst": 50.0, "quora": 80.0, "sts": 85.0}
    gaps = {"head": {"sst": -0.4, "quora": -0.9, "sts": head_sts},
            "pal-top-1": {"sst": -0.2, "quora": -0.5, "sts": -0.8},
            "pal-all": {"sst": 0.3, "quora": 0.1, "sts": -0.1}}
    size = {"head": 4_000, "pal-top-1": 400_000, "pal-all": 1_100_000}
    rows = []
    for adapter, per_task in gaps.items():
        for task, gap in per_task.items():
            for seed_shift in ((0.2, -0.2) if task == "sst" else (0.0,)):
                rows.append({"task": task, "adapter": adapter, "dev": joint[task] + gap + seed_shift,
                             "joint": joint[task], "separate": joint[task],
                             "vs_joint": round(gap + seed_shift, 2), "vs_separate": gap,
                             "adapter_bytes": size[adapter],
                             "adapter_share_of_trunk": size[adapter] / 90_000_000})
        rows.append({"task": "cfimdb", "adapter": adapter, "dev": 85.0, "joint": None,
                     "separate": 86.0, "vs_joint": None, "vs_separate": -1.0 + len(rows) / 100,
                     "adapter_bytes": size[adapter],
                     "adapter_share_of_trunk": size[adapter] / 90_000_000})
    path = tmp_path / "later-tasks.json"
    path.write_text(json.dumps({"rows": rows}))
    return path


def test_report_recommends_the_cheapest_adapter_within_a_point_of_joint(tmp_path: Path) -> None:
    bench, _ = write_inputs(tmp_path, top1_dev=74.0)
    # the head misses on sts by 1.6: PALs on top are the cheapest within a point everywhere
    later = write_later_tasks(tmp_path, head_sts=-1.6)
    report = build_report([bench], [], tmp_path / "r", None, later_tasks_file=later)
    add = report.add_task
    assert add.adapter == "pal-top-1"
    head = add.adapters[0]
    assert head.adapter == "head" and head.within == ["quora", "sst"]
    assert head.vs_joint == {"quora": -0.9, "sst": -0.4, "sts": -1.6}  # sst: mean of 2 seeds
    note = next(n.text for n in report.summary.notes if n.text.startswith("how to add a task"))
    assert "`palkit add-task RUN --task T --adapter pal --pal-layers top-1`" in note and "worst -0.80" in note and "400,000 bytes" in note
    assert "0.44% of the trunk" in note and "every left-out task, quora, sst, sts: worst" in note
    assert "how to add a task" in (tmp_path / "r" / "report.md").read_text()
    # within a point everywhere, the head wins: it is the fewest bytes
    later = write_later_tasks(tmp_path, head_sts=-0.7)
    assert build_report([bench], [], tmp_path / "r2", None,
                        later_tasks_file=later).add_task.adapter == "head"


def test_an_adapter_not_yet_run_on_every_left_out_task_is_not_recommended(tmp_path: Path) -> None:
    # the study writes rows as they finish: the head has no sts row yet, PALs on top have
    later = write_later_tasks(tmp_path, head_sts=-0.2)
    data = json.loads(later.read_text())
    data["rows"] = [r for r in data["rows"] if not (r["adapter"] == "head" and r["task"] == "sts")]
    later.write_text(json.dumps(data))
    bench, _ = write_inputs(tmp_path, top1_dev=74.0)
    add = build_report([bench], [], tmp_path / "r", None, later_tasks_file=later).add_task
    assert add.left_out_tasks == ["quora", "sst", "sts"] and add.adapter == "pal-top-1"
    assert "head 4,000 B, within for 2/3 left-out tasks (2 run so far)" in add.notes[-1].text


def test_report_names_the_closest_adapter_when_none_is_within(tmp_path: Path) -> None:
    bench, _ = write_inputs(tmp_path, top1_dev=74.0)
    later = write_later_tasks(tmp_path, head_sts=-3.0)
    data = json.loads(later.read_text())
    for r in data["rows"]:
        if r["adapter"] != "head" and r["task"] == "sts":
            r["vs_joint"] = -1.2 if r["adapter"] == "pal-all" else -2.0
    later.write_text(json.dumps(data))
    add = build_report([bench], [], tmp_path / "r", None, later_tasks_file=later).add_task
    assert add.adapter is None
    assert "no adapter is within 1.0 point" in add.notes[0].text
    assert "closest: pal-all (quora +0.10, sst +0.30, sts -1.20)" in add.notes[0].text


def test_report_without_the_later_tasks_study_says_which_flag_adds_it(tmp_path: Path) -> None:
    bench, _ = write_inputs(tmp_path, top1_dev=74.0)
    report = build_report([bench], [], tmp_path / "r", None)
    assert report.add_task.adapter is None
    notes = [n.text for n in report.summary.notes]
    assert any("how to add a task: not measured (give --later-tasks FILE" in n for n in notes)
    assert not any("lab." in n for n in notes)  # nothing outside the wheel


def test_report_refuses_a_later_tasks_file_that_is_not_there(tmp_path: Path) -> None:
    bench, _ = write_inputs(tmp_path, top1_dev=74.0)
    with pytest.raises(ReportError, match=r"absent.json: no such file \(--later-tasks"):
        build_report([bench], [], tmp_path / "r", None, later_tasks_file=tmp_path / "absent.json")


def test_without_the_reference_bundle_the_terminal_says_why_no_placement_was_chosen(
        tmp_path: Path, capsys) -> None:
    """The frontier's own reason reaches the terminal's "not measured" line, and no sentence
    of the notes names a choice that was not made."""
    from palkit.cli import main

    bench, accuracy = write_inputs(tmp_path, top1_dev=74.0)
    rows = json.loads(accuracy.read_text())
    rows["rows"] = [r for r in rows["rows"] if r["name"] != "pals-annealed"]
    accuracy.write_text(json.dumps(rows))
    assert main(["report", "--bench", str(bench), "--out", str(tmp_path / "r"), "--accuracy",
                 str(accuracy), "--summary", str(tmp_path / "s.json")]) == 0
    err = capsys.readouterr().err
    assert ("not measured: all_tasks_ratio_best_placement: no 'pals-annealed' bundle benched: "
            "nothing to compare against") in err
    notes = json.loads((tmp_path / "s.json").read_text())["notes"]
    assert not [n for n in notes if "None" in n]
    assert not [n for n in notes if n.startswith("all_tasks_ratio_best_placement:")]


def test_the_launch_bundle_is_the_one_recorded_without_pals_in_its_trunk(tmp_path: Path) -> None:
    """Named anything, the multi-task bundle whose trunk holds no PALs is the one launched; a
    bundle named shared with PALs in every layer is not."""
    from palkit.report.ingest import parse_bench
    from palkit.report.recommend import choose_launch
    from testing_utils import host_bench

    data = host_bench(tmp_path)
    subjects = data["subjects"]
    subjects["launch-me/executorch"] = {**subjects.pop("pal-top/executorch"), "pal_layers": []}
    subjects["shared/executorch"] = subjects.pop("pal/executorch")
    for row in data["results"]:
        row["subject"] = {"pal-top/executorch": "launch-me/executorch",
                          "pal/executorch": "shared/executorch"}.get(row["subject"],
                                                                      row["subject"])
    launch = choose_launch(parse_bench(data, "host.json"))
    assert launch.bundle.name == "launch-me/executorch"
    assert launch.versus.name == "separate/executorch/int8"
    data["subjects"]["launch-me/executorch"]["task_adapters"] = {
        "sst": {"kind": "pal", "layers": [5]}, "sts": {"kind": "head", "layers": []}}
    assert choose_launch(parse_bench(data, "host.json")).added_later == ["sst"]
