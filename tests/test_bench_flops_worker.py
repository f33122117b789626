"""FLOP counter against a hand count and torch's own counter; a bench worker on a tiny peer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from palkit.bench.flops import model_flops
from testing_utils import HANG_GUARD_S

BERT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4}


def test_flops_hand_count_plain_bert():
    s = 8
    per_layer = 4 * 2 * s * 32 * 32 + 2 * 2 * s * s * 32 + 2 * 2 * s * 32 * 64
    assert per_layer == 139264
    head = 2 * 32 * 32 + 2 * 32 * 5  # pooler on [CLS], then a 5-way head
    assert model_flops(BERT, None, 5, s)["matmul"] == 2 * per_layer + head


def test_flops_hand_count_pals_and_all_tasks():
    s, d = 8, 8
    pal = {"size": d, "heads": 2, "layers": [1], "share_projections": True}
    layer = 139264
    one_pal = 2 * s * 32 * d + 2 * s * d * 32 + 3 * 2 * s * d * d + 2 * 2 * s * s * d
    head = lambda n: 2 * 32 * 32 + 2 * 32 * n  # noqa: E731
    assert model_flops(BERT, pal, 5, s)["matmul"] == 2 * layer + one_pal + head(5)
    # all three tasks: layer 0 and layer 1's trunk part once (layer 1 is the first adapted
    # layer: its input is the same for every task), then its PAL + pooler + head per task
    got = model_flops(BERT, pal, [5, 2, 1], s, all_tasks=True)["matmul"]
    assert got == 2 * layer + 3 * one_pal + head(5) + head(2) + head(1)


def test_flops_match_torch_flop_counter_on_a_tiny_palbert(tiny_bert: Path):
    from torch.utils.flop_counter import FlopCounterMode

    from palkit.trainer.checkpoint import load_trunk
    from palkit.trainer.model import PalBert, PalConfig
    from palkit.trainer.placement import pal_layer_indices
    from palkit.trainer.tasks import BUILTIN_TASKS

    trunk, _ = load_trunk(tiny_bert)
    cfg = trunk.config
    pal = PalConfig(8, 2, pal_layer_indices(cfg.num_hidden_layers, "top"), True)
    specs = [BUILTIN_TASKS[t] for t in ("sst", "quora", "sts")]
    model = PalBert(trunk, specs, pal).eval()
    bert = {k: getattr(cfg, k) for k in BERT}
    s = 12
    ids = torch.randint(5, 50, (1, s))
    mask, types = torch.ones(1, s, dtype=torch.long), torch.zeros(1, s, dtype=torch.long)
    with torch.no_grad():
        with FlopCounterMode(display=False) as fc:
            model(ids, mask, types, task="sst")
        assert fc.get_total_flops() == model_flops(bert, pal.to_dict(), 5, s)["matmul"]
        with FlopCounterMode(display=False) as fc:
            model.forward_all(ids, mask, types)
        assert fc.get_total_flops() == model_flops(bert, pal.to_dict(), [5, 2, 1], s,
                                                   all_tasks=True)["matmul"]


@pytest.fixture(scope="session")
def tiny_separate_run(tmp_path_factory, tiny_bert: Path, tiny_data: Path) -> Path:
    from testing_utils import tiny_config

    from palkit.trainer.train import train
    out = tmp_path_factory.mktemp("runs") / "separate"
    return train(tiny_config(tiny_bert, tiny_data, out, mode="separate", epochs=1))


def test_worker_runs_a_tiny_ort_peer_in_a_fresh_process(tiny_separate_run: Path, tmp_path: Path):
    from palkit.bench.peers import build_ort_int8
    from palkit.bench.run import run_worker

    src = build_ort_int8(tiny_separate_run / "models" / "sst", tmp_path / "peer")
    assert src["fused"].get("Attention") == 2  # the BERT fusion found both layers
    subject = {"name": "peer/ort-int8", "runtime": "onnxruntime", "vocab_size": 100,
               "tasks": {"sst": src}, "all_tasks": None}
    lat = run_worker({"mode": "latency", "threads": 1, "seq_len": 16, "configs": ["task:sst"],
                      "warmup": 1, "runs": 5, "min_seconds": 0.0, "max_seconds": HANG_GUARD_S,
                      "subject": subject}, timeout=HANG_GUARD_S)
    row = lat["rows"][0]
    assert "error" not in row, row
    assert row["runs"] == 5 and 0 < row["p50_ms"] <= row["p90_ms"]
    assert lat["pid"] > 0 and lat["threads"] == 1
    load = run_worker({"mode": "load", "threads": 1, "seq_len": 16, "subject": subject},
                      timeout=HANG_GUARD_S)
    assert load["load_ms"] > 0 and load["output_shapes"]["sst"] == [[1, 5]]
    assert load["peak_rss_one_task"] >= load["rss_after_import"] > 0
    json.dumps(load)


def test_bench_end_to_end_on_tiny_peers_writes_a_valid_file(tiny_separate_run: Path,
                                                            tiny_data: Path, tmp_path: Path,
                                                            capsys):
    from palkit.bench.options import BenchOptions, LatencyBudget
    from palkit.bench.run import bench
    from palkit.bench.schema import load_bench_file

    out = tmp_path / "bench.json"
    bench([], [tiny_separate_run], out, BenchOptions(
        runtimes=["onnxruntime"], peers=["ort-int8"], threads=[1], seq_lens=[16],
        timing=LatencyBudget(1, 3, 0.0, 1.0), splits=["dev"], data_dir=tiny_data, max_examples=8,
        work=tmp_path / "work", ceiling=False, rounds=2))
    data = load_bench_file(out)
    assert data["machine"]["kind"] == "host" and data["machine"]["model"]
    assert set(data["subjects"]) == {"peer/ort-int8"}
    configs = {r["config"] for r in data["results"]}
    assert configs == {"task:sst", "task:quora", "task:sts", "all_tasks"}
    assert all(r["p50_ms"] > 0 and r["matmul_flops"] > 0 for r in data["results"])
    assert len(data["results"]) == 4                      # one row per config, two rounds each
    for row in data["results"]:                           # p50: the median of the two rounds
        assert len(row["p50_ms_rounds"]) == 2
        assert row["p50_ms"] == pytest.approx(sum(row["p50_ms_rounds"]) / 2)
    assert data["subjects"]["peer/ort-int8"]["memory_rss_bytes"]["model_all_tasks"] > 0
    entry = data["subjects"]["peer/ort-int8"]
    repeats = entry["load_detail"]["repeats"]                  # load and swap: 3 processes
    assert len({r["pid"] for r in repeats}) == 3
    for task, swap in entry["swap_ms"]["per_task"].items():
        assert swap == sorted(r["swap_ms"][task] for r in repeats)[1]
    assert entry["load_ms"]["onnxruntime"] == sorted(r["load_ms"] for r in repeats)[1]
    assert data["accuracy"]["fp32:separate"]["kind"] == "separate"
    assert 0 <= data["accuracy"]["fp32:separate"]["dev"]["avg"] <= 1
    # progress over the jobs (load + one latency condition twice), plain lines when not a terminal
    err = " ".join(capsys.readouterr().err.split())  # rich may wrap long status lines
    assert "bench: 1/3 (" in err and "bench: 3/3 (" in err and "ETA" in err
    assert "(round 2)" in err
    assert "peer/ort-int8 threads=1 seq=16: task:" in err and "all_tasks=" in err, err
    assert "bench: accuracy: 1/1 (" in err


class FakeClock:
    """Stands in for bench.worker's `time`: only the timed calls move it, so what the test sees
    never depends on the machine's load."""

    def __init__(self) -> None:
        self.ns = 0

    def perf_counter_ns(self) -> int:
        return self.ns

    def perf_counter(self) -> float:
        return self.ns / 1e9

    def spend(self, ms: float) -> None:
        self.ns += int(ms * 1e6)


def _models_that_evict_each_other(names: list[str], clock: FakeClock) -> dict:
    """Calls that cost 5 ms right after another model ran (its weights out of the caches) and
    0.2 ms when the same model ran last, as three separate models on a CPU do."""
    last: list[str | None] = [None]

    def call(name: str) -> None:
        clock.spend(5.0 if last[0] != name else 0.2)
        last[0] = name
    return {n: (lambda n=n: call(n)) for n in names}


def test_timing_in_blocks_keeps_out_the_call_that_refills_the_caches(monkeypatch):
    from statistics import median

    from palkit.bench import worker
    from palkit.bench.worker import time_interleaved
    clock = FakeClock()
    monkeypatch.setattr(worker, "time", clock)
    names = ["sst", "quora", "sts"]
    one_by_one = time_interleaved(_models_that_evict_each_other(names, clock), 0, 6, 0.0, 5.0)
    blocks = time_interleaved(_models_that_evict_each_other(names, clock), 0, 6, 0.0, 5.0,
                              block=4)
    assert all(median(v) == 5.0 for v in one_by_one.values())
    assert all(median(v) == 0.2 for v in blocks.values())
    assert all(len(v) % 3 == 0 and len(v) >= 6 for v in blocks.values())   # 3 timed per block


def test_merged_rounds_take_medians_and_keep_what_each_round_saw():
    from palkit.bench.run import merge_rounds

    def row(p50, runs, load, error=None):
        ok = p50 is not None
        return {"id": "latency:a:task:sst:t1:s128", "config": "task:sst", "p50_ms": p50,
                "p90_ms": p50 + 1 if ok else None, "min_ms": p50 - 1 if ok else None,
                "mean_ms": p50, "runs": runs, "worker_load_avg": load, "round": 0,
                **({"error": error} if error else {})}
    (merged,) = merge_rounds([row(12.0, 30, 0.5), row(10.0, 10, 1.5), row(11.0, 20, 0.7),
                              row(None, 0, 2.0, "RuntimeError: boom")])
    assert merged["p50_ms"] == 11.0 and merged["p90_ms"] == 12.0       # medians of the good three
    assert merged["p50_ms_rounds"] == [12.0, 10.0, 11.0]
    assert merged["min_ms"] == 9.0 and merged["runs"] == 60
    assert merged["mean_ms"] == pytest.approx((12 * 30 + 10 * 10 + 11 * 20) / 60)
    assert merged["worker_load_avg"] == 1.5 and "round" not in merged and "error" not in merged
    (failed,) = merge_rounds([row(None, 0, 1.0, "RuntimeError: boom")] * 2)
    assert failed["error"] == "RuntimeError: boom" and failed["p50_ms"] is None
