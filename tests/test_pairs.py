"""Paired timing (bench/pairs.py): the estimator on synthetic timings with drift, outliers and a
true difference; the words an interval allows; the calibration flag; which pairs a bench times;
the plan that decides how many processes time them (bench/plan.py, on a synthetic worker and a
fake clock); the worker that times them; and the paired accuracy gap."""
from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest

from palkit.bench.options import BenchOptions, TimingPlan
from palkit.bench.pairs import (LEVEL_BAND, TARGET_HALFWIDTH, calibration_problem, log_halfwidth,
                                paired_ratio, verdict_pairs, wording)
from palkit.bench.plan import PairJob, finish_pairs, pair_job, ratios_by_runtime, time_pairs
from palkit.core.errors import ConfigError


def drifting(true_ratio: float, n: int = 24, drift: float = 0.5, noise: float = 0.02,
             outliers: int = 0, seed: int = 0) -> tuple[list[float], list[float]]:
    """Block times of two programs on a machine whose speed drifts by `drift` over the run
    (both sides alike within a pair), with multiplicative noise and `outliers` blocks of one side
    hit by a neighbour (3x slower)."""
    rng = random.Random(seed)
    den = [10 * (1 + drift * i / n) * math.exp(rng.gauss(0, noise)) for i in range(n)]
    num = [d * true_ratio * math.exp(rng.gauss(0, noise)) for d in den]
    for i in rng.sample(range(n), outliers):
        num[i] *= 3
    return num, den


def test_drift_cancels_in_the_pairs():
    """The machine slows by half over the run: medians of unpaired samples would move, the
    paired estimate of identical programs stays level."""
    est = paired_ratio([drifting(1.0, drift=0.5)])
    low, high = est["interval"]
    assert low <= 1.0 <= high and high - low < 0.05
    assert wording(est["interval"]) == "level"


def test_outlier_blocks_do_not_move_the_estimate():
    clean = paired_ratio([drifting(1.0, seed=1)])["ratio"]
    hit = paired_ratio([drifting(1.0, seed=1, outliers=4)])["ratio"]  # 4 of 24 blocks 3x slow
    assert abs(hit - clean) < 0.02 and abs(hit - 1) < 0.03


def test_a_true_five_percent_difference_is_found_and_called_slower():
    est = paired_ratio([drifting(1.05, noise=0.01)])
    low, high = est["interval"]
    assert low < 1.05 < high and low > 1 + LEVEL_BAND
    assert wording(est["interval"]) == "slower"
    assert wording([1 / high, 1 / low]) == "faster"


def test_an_interval_straddling_the_band_says_not_resolved():
    assert wording([0.99, 1.06]) == "not resolved"
    assert wording([0.975, 1.02]) == "level"


def test_the_interval_holds_the_true_ratio_about_95_percent_of_the_time():
    covered = sum(low <= 1.02 <= high for low, high in
                  (paired_ratio([drifting(1.02, noise=0.03, seed=s)])["interval"]
                   for s in range(200)))
    assert 180 <= covered <= 200


def test_processes_that_disagree_widen_the_interval_to_cover_them():
    """Each process shifts the ratio a little (its own memory layout, caches, threads): pooling
    the pairs alone would give an interval too narrow for the next run; the between-process
    interval covers the processes' spread."""
    shifts = (0.99, 1.0, 1.012)
    processes = [drifting(shift, n=8, noise=0.002, seed=k) for k, shift in enumerate(shifts)]
    est = paired_ratio(processes)
    low, high = est["interval"]
    assert est["processes"] == 3 and est["pairs"] == 24
    assert low < min(shifts) and high > max(shifts)
    one = paired_ratio(processes[:1])["interval"]
    assert one[1] - one[0] < high - low


def test_calibration_flags_a_misreading_and_a_wide_interval():
    assert calibration_problem({"ratio": 1.01, "interval": [0.99, 1.03]}) is None
    assert "outside 1.00" in calibration_problem({"ratio": 1.05, "interval": [1.03, 1.07]})
    assert "wider than" in calibration_problem({"ratio": 1.0, "interval": [0.90, 1.11]})


def _subject(name, role, runtime="executorch", tasks=("sst", "quora"), adapters=None):
    return SimpleNamespace(name=name, role=role, runtime=runtime, precision="int8",
                           tasks={t: {} for t in tasks}, extra={"task_adapters": adapters or {}},
                           worker_subject=lambda: {"name": name})


def test_a_bench_times_the_verdicts_ratios_and_its_calibration():
    shared = _subject("shared/executorch", "pal", tasks=("cfimdb", "quora", "sst"),
                      adapters={"cfimdb": {"kind": "pal", "layers": [5]},
                                "quora": {"kind": "head"}, "sst": {"kind": "head"}})
    pairs = verdict_pairs([shared, _subject("separate/executorch/int8", "separate",
                                            tasks=("quora", "sst")),
                           _subject("peer/et-int8", "peer", tasks=("quora", "sst"))])
    assert [(p.kind, p.num.subject, p.num.config, p.den.subject, p.den.config) for p in pairs] == [
        ("aa", "separate/executorch/int8", "task:quora", "separate/executorch/int8", "task:quora"),
        ("identical_compute", "shared/executorch", "task:quora", "separate/executorch/int8",
         "task:quora"),
        ("all_tasks", "shared/executorch", "all_tasks", "separate/executorch/int8", "all_tasks"),
        ("all_vs_one", "shared/executorch", "all_tasks", "shared/executorch", "task:quora"),
        ("peer", "shared/executorch", "task:quora", "peer/et-int8", "task:quora")]


def test_on_onnx_runtime_a_head_shares_the_graph_of_the_bundles_pals():
    """ONNX Runtime's graph runs the union of the bundle's placements for every task: with a
    task added as top-1 PALs, a launch task's head is not a separate model's compute."""
    adapters = {"cfimdb": {"kind": "pal", "layers": [5]}, "quora": {"kind": "head"}}
    shared = _subject("shared/onnxruntime", "pal", "onnxruntime", ("cfimdb", "quora"), adapters)
    separate = _subject("separate/onnxruntime/int8", "separate", "onnxruntime", ("quora",))
    kinds = [p.kind for p in verdict_pairs([shared, separate])]
    assert kinds == ["aa", "one_task", "all_tasks", "all_vs_one"]
    heads = _subject("shared/onnxruntime", "pal", "onnxruntime", ("quora",),
                     {"quora": {"kind": "head"}})
    assert "identical_compute" in [p.kind for p in verdict_pairs([heads, separate])]


def _four_subjects():
    return [_subject("shared/executorch", "pal", adapters={"quora": {"kind": "head"},
                                                           "sst": {"kind": "head"}}),
            _subject("separate/executorch/int8", "separate"),
            _subject("shared/onnxruntime", "pal", "onnxruntime"),
            _subject("separate/onnxruntime/int8", "separate", "onnxruntime")]


def test_one_process_per_runtime_times_all_its_ratios_each_pass_starting_one_later():
    subjects = _four_subjects()
    by_runtime = ratios_by_runtime(subjects)
    assert list(by_runtime) == ["executorch", "onnxruntime"]
    et = [pair_job(k, by_runtime["executorch"], subjects, 1, 128) for k in range(5)]
    assert [j.pairs[0].kind for j in et[:4]] == ["aa", "identical_compute", "all_tasks",
                                                 "all_vs_one"]
    assert all(sorted(p.id for p in j.pairs) == sorted(p.id for p in et[0].pairs) for j in et)
    for job in et + [pair_job(0, by_runtime["onnxruntime"], subjects, 1, 128)]:
        runtimes = {s.runtime for s in job.sides}
        assert len(runtimes) == 1 and {p.num.subject for p in job.pairs} <= {
            s.name for s in job.sides}
    from palkit.bench.run import plan  # the other jobs: no paired ratio among them
    jobs = plan(subjects, [1], [128], ceiling=False, native=False, rounds=1)
    assert {j.kind for j in jobs} == {"load", "latency"}


class SyntheticMachine:
    """A worker and a clock: each process of a ratio reads its true ratio shifted by the
    process's own layout (log-normal, `spread` by the ratio's kind), each pair with a little
    noise; every ratio a process times takes `seconds` of the fake clock."""

    def __init__(self, spread: dict[str, float], seconds: float = 2.0, seed: int = 0):
        self.spread, self.seconds, self.now = spread, seconds, 0.0
        self.rng = random.Random(seed)
        self.processes: list[list[str]] = []  # the ratio ids each process timed

    def clock(self) -> float:
        return self.now

    def worker(self, spec, timeout):
        assert spec["mode"] == "pairs" and spec["block"] == BenchOptions().timing.block
        out = {}
        for ratio in spec["ratios"]:
            kind = ratio["id"].split(":")[1]
            shift = self.rng.gauss(0, self.spread.get(kind, 0.002))
            den = [10.0] * spec["pairs"]
            out[ratio["id"]] = {"num_ms": [d * math.exp(shift + self.rng.gauss(0, 0.005))
                                           for d in den], "den_ms": den}
            self.now += self.seconds
        self.processes.append([r["id"] for r in spec["ratios"]])
        return {"ratios": out}


def _time(machine: SyntheticMachine, plan: TimingPlan) -> dict:
    data = {"pairs": {}}
    time_pairs(_four_subjects(), data, BenchOptions(threads=[1], seq_lens=[128],
                                                    timing_plan=plan),
               machine.worker, machine.clock)
    return data


def test_a_quiet_machine_stops_at_the_minimum():
    machine = SyntheticMachine({})
    data = _time(machine, TimingPlan())
    assert data["timing_plan"] == {
        "processes": 5, "pairs": 6, "block": 4, "min_processes": 5, "max_processes": 30,
        "max_seconds": 300.0,
        "target_halfwidth": TARGET_HALFWIDTH, "stopped": "resolved",
        "seconds": 2.0 * 5 * len(data["pairs"])}
    assert len(machine.processes) == 2 * 5  # one per runtime and pass
    assert all(p["processes"] == 5 and log_halfwidth(p["interval"]) <= TARGET_HALFWIDTH
               for p in data["pairs"])
    assert TARGET_HALFWIDTH == pytest.approx(math.log(1.03))
    assert wording([math.exp(-TARGET_HALFWIDTH), math.exp(TARGET_HALFWIDTH)]) == "level"


def test_a_noisy_ratio_gets_more_processes_until_its_interval_resolves():
    """Processes of the all-tasks ratios disagree by about 4%: five leave their interval wider
    than the target, so the plan adds processes of those ratios alone until it is not."""
    machine = SyntheticMachine({"all_tasks": 0.04})
    data = _time(machine, TimingPlan())
    plan = data["timing_plan"]
    assert plan["stopped"] == "resolved" and plan["processes"] > 5
    assert all(ids == [i for i in ids if ":all_tasks:" in i] for ids in machine.processes[10:])
    for p in data["pairs"]:
        assert log_halfwidth(p["interval"]) <= TARGET_HALFWIDTH
        assert p["processes"] == 5 or p["kind"] == "all_tasks"  # only they were wide
    assert max(p["processes"] for p in data["pairs"]) == plan["processes"]
    assert plan["seconds"] == machine.now


def test_the_plan_stops_at_its_time_cap_or_its_most_processes():
    """Beyond the minimum, a pass that would end past max_seconds is not started: with 4 s per
    extra pass (the two all-tasks ratios) and 10 s, two more; or max_processes."""
    machine = SyntheticMachine({"all_tasks": 0.3})  # never resolves
    plan = _time(machine, TimingPlan(max_seconds=10.0))["timing_plan"]
    assert (plan["stopped"], plan["processes"]) == ("time cap", 7)
    assert plan["seconds"] == machine.now == 2.0 * (8 * 5 + 2 * 2)  # 8 ratios, then 2
    machine = SyntheticMachine({"all_tasks": 0.3})
    plan = _time(machine, TimingPlan(max_processes=6))["timing_plan"]
    assert (plan["stopped"], plan["processes"]) == ("max processes", 6)
    quiet = _time(SyntheticMachine({}), TimingPlan(min_processes=3, max_seconds=0.0))
    assert quiet["timing_plan"]["stopped"] == "resolved"  # the cap only limits what is added


def test_a_ratio_one_process_timed_is_not_resolved_and_the_plan_needs_two():
    """A ratio whose other processes failed has no between-process interval: it gets more
    processes; a plan of fewer than two, or a maximum under the minimum, is refused."""
    machine = SyntheticMachine({})
    failing = machine.worker

    def worker(spec, timeout):  # the all-tasks ratios fail in passes 2 to 5: one timing each
        out = failing(spec, timeout)
        if 2 <= len(machine.processes) - 1 < 10:
            for rid in out["ratios"]:
                if ":all_tasks:" in rid:
                    out["ratios"][rid] = {"error": "crashed"}
        return out

    data = {"pairs": {}}
    time_pairs(_four_subjects(), data, BenchOptions(threads=[1], seq_lens=[128]), worker,
               machine.clock)
    all_tasks = [p for p in data["pairs"] if p["kind"] == "all_tasks"]
    assert all_tasks and all(p["processes"] >= 2 for p in all_tasks)
    assert data["timing_plan"]["stopped"] == "resolved"
    for lowest, highest in ((1, 5), (5, 4)):
        with pytest.raises(ConfigError, match="give 2 <= min <= max"):
            TimingPlan(min_processes=lowest, max_processes=highest)


def test_without_separate_models_nothing_is_timed_and_no_plan_recorded():
    data = {"pairs": {}}
    time_pairs([_subject("peer/et-int8", "peer")], data, BenchOptions(), SyntheticMachine(
        {}).worker)
    assert data == {"pairs": []}


def test_each_process_times_its_runtimes_ratios_and_the_file_keeps_their_blocks(et_fp32):
    """Two processes of one runtime's ratios (an A/A pair, whose side is loaded twice, all tasks
    against one, and one that cannot run) through the worker: each ratio keeps every process's
    block timings, and its estimate is made from them."""
    from palkit.bench.options import LatencyBudget
    from palkit.bench.pairs import Pair, Side
    from palkit.bench.plan import record_pairs
    from palkit.bench.run import bench_json, run_worker
    from palkit.bench.subjects import discover

    subject = next(s for s in discover([et_fp32], [], ["executorch"], [], None)[0])
    one, every = Side(subject.name, "task:sst"), Side(subject.name, "all_tasks")
    missing = Side(subject.name, "task:no-such-task")
    ratios = (Pair("aa", one, one, "A/A"), Pair("all_vs_one", every, one, "all vs one"),
              Pair("one_task", missing, one, "a task the bundle lacks"))
    data = {"pairs": {}, "notes": ["a worker's error may name a shape [1,128]"]}
    options = BenchOptions(timing=LatencyBudget(1, 3, 0.0, 1.0))
    pairs = options.timing_plan.pairs
    for k in range(2):
        record_pairs(PairJob(k, 1, 16, ratios, (subject,)), data, options, run_worker)
    finish_pairs(data)
    assert [p["kind"] for p in data["pairs"]] == ["aa", "all_vs_one", "one_task"]
    refused = data["pairs"].pop()  # one ratio that cannot run costs the others nothing
    assert "no-such-task" in refused["error"] and not refused["timings"]
    for entry in data["pairs"]:
        assert len(entry["timings"]) == entry["processes"] == 2
        assert all(len(t["num_ms"]) == len(t["den_ms"]) == pairs for t in entry["timings"])
        assert entry["pairs"] == 2 * pairs and entry["interval"][0] <= entry["ratio"]
    assert data["pairs"][1]["ratio"] > 1   # all tasks take longer than one
    text = bench_json(data)  # as written: each list of block timings on one line, strings kept
    assert json.loads(text) == data and "shape [1,128]" in text
    assert sum('"num_ms": [' in line and line.count(",") == pairs - 1
               for line in text.splitlines()) == 4


def _pair(kind, num, den, ratio, interval, what):
    return {"id": f"pair:{kind}:{num}/{den}", "kind": kind, "what": what,
            "num": {"subject": num.split(":")[0], "config": num.split(":", 1)[1]},
            "den": {"subject": den.split(":")[0], "config": den.split(":", 1)[1]},
            "threads": 1, "seq_len": 128, "num_ms": [1.0] * 24, "den_ms": [1.0] * 24,
            "ratio": ratio, "interval": interval, "pairs": 24}


def recommended_bench(tmp_path, aa=(1.004, [0.99, 1.02])):
    """The recommended path alone, as the issue's new user benched it: the shared bundle (three
    heads on one trunk, cfimdb added later as top-1 PALs) and the separate models."""
    from testing_utils import BENCH_TASKS, bench_rows, bench_subject, host_bench

    data = host_bench(tmp_path)
    shared_run, sep_run = tmp_path / "runs" / "shared", tmp_path / "runs" / "separate"
    shared = bench_subject("pal", "executorch", "int8", "shared (executorch, int8)",
                           {"trunk_bytes": 22_000_000, "adapter_bytes": {t: 2_000 for t in
                                                                         BENCH_TASKS},
                            "total_bytes": 22_600_000}, 30_000_000, 34_000_000, 2.5, (),
                           {t: str(shared_run / "model") for t in BENCH_TASKS})
    shared["task_adapters"] = {"cfimdb": {"kind": "pal", "layers": [5]},
                               **{t: {"kind": "head", "layers": []} for t in BENCH_TASKS}}
    data["subjects"] = {"shared/executorch": shared,
                        "separate/executorch/int8": data["subjects"]["separate/executorch/int8"]}
    data["subjects"]["separate/executorch/int8"]["fp32_model_dirs"] = {
        t: str(sep_run / t / "model") for t in BENCH_TASKS}
    data["results"] = (bench_rows("shared/executorch", "executorch", 12.0, 14.0)
                       + bench_rows("separate/executorch/int8", "executorch", 12.0, 36.0))
    gold = [0, 1, 2, 1] * 1000
    pred_separate = [g if i % 5 else (g + 1) % 3 for i, g in enumerate(gold)]  # 80% right
    pred_shared = [g if i % 4 else (g + 1) % 3 for i, g in enumerate(gold)]    # 75% right
    data["accuracy"] = {
        "shared/executorch": {"test": {"avg": 0.75, "examples": {
            "sst": {"pred": pred_shared, "gold": gold}}}},
        "separate/executorch/int8": {"test": {"avg": 0.80, "examples": {
            "sst": {"pred": pred_separate, "gold": gold}}}},
        "fp32:shared": {"test": {"avg": 0.76}, "run": str(shared_run), "kind": "joint",
                        "optimizer_steps": 400},
        "fp32:separate": {"test": {"avg": 0.79}, "run": str(sep_run), "kind": "separate",
                          "optimizer_steps": 1200}}
    sep, sh = "separate/executorch/int8", "shared/executorch"
    data["pairs"] = [
        _pair("aa", f"{sep}:task:sst", f"{sep}:task:sst", *aa, "A/A"),
        _pair("identical_compute", f"{sh}:task:sst", f"{sep}:task:sst", 1.001, [0.985, 1.016],
              "one task (sst) of shared / its separate model"),
        _pair("all_tasks", f"{sh}:all_tasks", f"{sep}:all_tasks", 0.36, [0.35, 0.37],
              "all tasks of shared / the separate models"),
        _pair("all_vs_one", f"{sh}:all_tasks", f"{sh}:task:sst", 1.12, [1.10, 1.14],
              "all tasks of shared / one task")]
    return data


def test_the_report_leads_with_the_recommended_configuration(tmp_path, capsys):
    import json

    from palkit import cli

    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(recommended_bench(tmp_path)))
    assert cli.main(["report", "--bench", str(bench), "--out", str(tmp_path / "r"),
                     "--summary", str(tmp_path / "summary.json")]) == 0
    out = capsys.readouterr()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary)[:2] == ["recommended", "calibration"]
    rec = summary["recommended"]
    assert rec["bundle"] == "shared/executorch" and rec["added_later"] == ["cfimdb"]
    assert [k for k, v in rec.items() if v is None] == []  # no null headline key
    assert rec["one_task"]["reads"] == "level" and rec["all_tasks"]["reads"] == "faster"
    assert rec["all_tasks_vs_one"]["reads"] == "slower"
    assert rec["accuracy"]["gap"] == pytest.approx(-5.0)
    low, high = rec["accuracy"]["interval"]
    assert low < -5.0 < high < 0 and rec["accuracy"]["budgets"] == {"joint": 400,
                                                                     "separate": 1200}
    assert not summary["calibration"]["noisy"]
    assert "recommended: shared/executorch / separate/executorch/int8" in out.out
    assert "1.00x [0.98, 1.02]" in out.out and "0.36x [0.35, 0.37]" in out.out
    assert "unequal" in out.out  # the budgets beside the gap
    # without all-layer PALs the paper's reference is one line, not a page of dashes
    assert "the paper's reference (all-layer PALs) was not benched" in out.err
    assert "not measured:" not in out.err
    report_md = (tmp_path / "r" / "report.md").read_text()
    assert report_md.index("## The recommended configuration") < report_md.index(
        "## The paper's reference")
    reference = report_md.split("## The paper's reference")[1].split("\n## ")[0]
    assert "No all-layer PAL bundle with latency results was benched" in reference
    assert "`latency_ratio_pal_vs_plain` (<= 1.05)" in reference and "| measure |" not in reference
    notes = [line for line in reference.splitlines() if line.startswith("- ")]
    assert not [n for n in notes if n.endswith("the inputs lack what it needs)")]
    # a target that needs something other than an all-layer bundle keeps its own note
    assert any(n.startswith("- all_tasks_ratio_best_placement: needs") for n in notes)


def test_a_calibration_pair_off_one_flags_the_run_as_noisy(tmp_path, capsys):
    import json

    from palkit import cli

    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(recommended_bench(tmp_path, aa=(1.06, [1.04, 1.08]))))
    assert cli.main(["report", "--bench", str(bench), "--out", str(tmp_path / "r")]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["calibration"]["noisy"]
    assert "reads 1.060, outside 1.00 +- 3%" in report["calibration"]["why"][0]
    assert "NOISY RUN" in capsys.readouterr().out
