"""The trainer's speed levers: bench-train's entry, length-bucketed batches, padding for a
compiled model, the FLOP count behind the GPU utilisation figure."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from palkit import cli
from palkit.trainer.checkpoint import load_trunk
from palkit.trainer.data import EncodedSplit, collate
from palkit.trainer.model import PalBert
from palkit.trainer.profile import bench_training, step_flops
from palkit.trainer.sampling import LengthBuckets, TaskStream
from palkit.trainer.tasks import resolve_tasks
from palkit.trainer.train import TrainingError
from testing_utils import poison_loss_at_call, tiny_config


def test_bench_training_entry_on_a_tiny_run(tmp_path, tiny_bert, tiny_data):
    entry = bench_training(tiny_config(tiny_bert, tiny_data, tmp_path / "unused"), steps=4,
                           warmup=1, repeats=2)
    assert len(entry["repeats"]) == 2 and entry["steps"] == 4
    for r in entry["repeats"]:
        # the figures are rounded (steps/s to 0.001): abs covers a slow run, rel a fast one
        assert r["steps_per_s"] == pytest.approx(4 / r["wall_s"], rel=1e-2, abs=1e-3)
        assert 0 < r["tokens_per_s"] <= r["padded_tokens_per_s"]
        assert r["cpu_s"] > 0 and r["mfu"] is None          # no peak is defined for a CPU
    assert set(entry["shares"]) == {"data", "forward_backward", "optimizer"}
    assert sum(entry["shares"].values()) == pytest.approx(1.0, abs=2e-3)
    assert entry["shares"]["optimizer"] > 0 and entry["shares"]["forward_backward"] > 0
    assert (entry["graphs"], entry["captured"], entry["peak_gpu_memory_gib"]) == (0, False, None)
    # not given, --cuda-graphs and --compile resolve to what a CPU runs
    assert (entry["bench_mode"], entry["cuda_graphs"], entry["compile"]) == ("eager-fp32", False,
                                                                             False)
    assert entry["device"].startswith("cpu (") and entry["precision"] == "fp32"
    assert (entry["batch_size"], entry["max_len"]) == (8, 32)
    assert not (tmp_path / "unused").exists()             # benchmarking writes no run
    with pytest.raises(TrainingError, match="--mode shared --tasks TASK"):
        bench_training(tiny_config(tiny_bert, tiny_data, tmp_path / "unused", mode="separate"),
                       steps=1, warmup=0, repeats=1)


def test_bench_train_command_appends_entries(tmp_path, tiny_bert, tiny_data, capsys):
    results = tmp_path / "speed.json"
    args = ["bench-train", "--base-model", str(tiny_bert), "--data-dir", str(tiny_data),
            "--device", "cpu", "--batch-size", "4", "--max-len", "16", "--pal-size", "8",
            "--pal-heads", "2", "--steps", "2", "--warmup", "1", "--repeat", "1", "--results",
            str(results)]
    assert cli.main(args) == 0
    assert cli.main([*args, "--length-buckets", "2", "--machine", "test box"]) == 0
    entries = json.loads(results.read_text())
    assert [e["machine"] for e in entries] == [entries[0]["device"], "test box"]
    assert [e["length_buckets"] for e in entries] == [0, 2]
    for e in entries:
        assert {"machine", "device", "precision", "batch_size", "max_len", "steps_per_s",
                "tokens_per_s", "command"} <= set(e)
        assert e["command"].startswith("palkit bench-train ") and "--batch-size 4" in e["command"]
    assert "--length-buckets 2" in entries[1]["command"]
    assert "steps/s" in capsys.readouterr().out


def _drain(stream: TaskStream, n: int, batch: int) -> list[list[int]]:
    return [stream.take(batch) for _ in range(n)]


def test_length_buckets_keep_every_pass_a_permutation_and_pad_less():
    rng = random.Random(0)
    lengths = [rng.randint(3, 60) for _ in range(50)]      # 50: passes do not end on a batch
    buckets = LengthBuckets(lengths, batch=4, group=3)
    stream = TaskStream(50, seed=1, task_index=0, buckets=buckets)
    batches = _drain(stream, 50, 4)                          # four passes
    flat = [i for b in batches for i in b]
    for p in range(4):
        assert sorted(flat[p * 50:(p + 1) * 50]) == list(range(50))
    # Every batch within a pass comes from one length-sorted run, also in passes that start
    # mid-batch (only the batch that straddles two passes mixes them).
    inside = [b for k, b in enumerate(batches) if (4 * k) // 50 == (4 * k + 3) // 50]
    assert len(inside) == 48
    assert all([lengths[i] for i in b] == sorted(lengths[i] for i in b) for b in inside)
    plain = _drain(TaskStream(50, seed=1, task_index=0), 50, 4)
    padded = lambda bs: sum(len(b) * max(lengths[i] for i in b) for b in bs)  # noqa: E731
    assert padded(batches) < 0.9 * padded(plain)
    # A stream resumed from its count continues exactly (what --resume relies on).
    resumed = TaskStream(50, seed=1, task_index=0, drawn=4 * 17, buckets=buckets)
    assert _drain(resumed, 33, 4) == batches[17:]


def test_collate_rounds_the_width_up_for_a_compiled_model():
    split = EncodedSplit([[2, 5, 3], [2, 5, 6, 7, 3]], [[0] * 3, [0] * 5], torch.zeros(2))
    assert collate(split, [0, 1], pad_id=0)["input_ids"].shape == (2, 5)
    batch = collate(split, [0, 1], pad_id=0, pad_multiple=16)
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].sum().item() == 8


@pytest.mark.parametrize("pals", [False, True])
def test_step_flops_is_the_hand_count_of_the_matmuls(tiny_bert: Path, pals: bool):
    """The tiny BERT: d=32, 2 layers, FFN 64; PALs of width 8 in both layers, V^E/V^D shared.
    Embedding lookups, LayerNorms and biases are not matmuls and do not count; the pooler and
    the head see one row per example; a shared V^E/V^D runs once per adapted layer."""
    from palkit.trainer.model import PalConfig
    trunk, _ = load_trunk(tiny_bert)
    model = PalBert(trunk, resolve_tasks(["sst"], []),
                    PalConfig(8, 2, (0, 1), True) if pals else None)
    b, s = 3, 10
    per_token = 2 * (4 * 32 * 32 + 32 * 64 + 64 * 32)             # Q, K, V, O, FFN in, FFN out
    attention = 2 * 4 * b * s * s * 32                            # QK^T and PV, two layers
    if pals:
        per_token += 2 * (32 * 8 + 3 * 8 * 8 + 8 * 32)            # V^E, q, k, v, V^D per layer
        attention += 2 * 4 * b * s * s * 8
    forward = 2 * per_token * b * s + 2 * (32 * 32 + 32 * 5) * b + attention   # + pooler, head
    assert step_flops(model, "sst", b, s) == 3 * forward


def test_step_flops_matches_pytorchs_flop_counter(tiny_bert: Path):
    """An independent count: PyTorch's FlopCounterMode over one forward and backward (eval
    mode, where attention is written out as matrix multiplies it counts)."""
    from torch.utils.flop_counter import FlopCounterMode

    from palkit.trainer.model import PalConfig
    trunk, _ = load_trunk(tiny_bert)
    model = PalBert(trunk, resolve_tasks(["sst", "sts"], []), PalConfig(8, 2, (1,), False)).eval()
    ids = torch.randint(5, 50, (4, 12))
    with FlopCounterMode(display=False) as counter:
        model(ids, torch.ones_like(ids), torch.zeros_like(ids), task="sts").sum().backward()
    assert step_flops(model, "sts", 4, 12) == counter.get_total_flops()


def test_bench_modes_side_by_side_and_cuda_only_modes_skipped_on_cpu(tmp_path, tiny_bert,
                                                                     tiny_data, capsys):
    results = tmp_path / "speed.json"
    assert cli.main(["bench-train", "--base-model", str(tiny_bert), "--data-dir", str(tiny_data),
                     "--device", "cpu", "--batch-size", "4", "--max-len", "16", "--pal-size", "8",
                     "--pal-heads", "2", "--steps", "2", "--warmup", "1", "--repeat", "1",
                     "--modes", "eager-fp32,captured,eager-bf16", "--results", str(results),
                     "--machine", "test box"]) == 0
    entries = json.loads(results.read_text())
    assert [e["bench_mode"] for e in entries] == ["eager-fp32", "captured", "eager-bf16"]
    assert [e.get("precision") for e in entries] == ["fp32", None, "bf16"]
    assert entries[1]["skipped"].endswith("time that as --cuda-graphs without --modes)")
    assert "steps_per_s" not in entries[1]
    assert all(e["machine"] == "test box" and "--modes eager-fp32,captured,eager-bf16"
               in e["command"] for e in entries)
    out = capsys.readouterr().out
    assert "captured: skipped, needs a CUDA device" in out and "eager-bf16: " in out
    with pytest.raises(TrainingError, match="unknown mode.*fastest.*choose from eager-fp32"):
        from palkit.trainer.profile import bench_modes
        bench_modes(tiny_config(tiny_bert, tiny_data, tmp_path / "x"), ["fastest"], 1, 0, 1)


def test_bench_times_the_static_step_uncaptured_on_cpu(tmp_path, tiny_bert, tiny_data):
    """--cuda-graphs on a CPU: the padded widths count in the padded tokens, nothing captured."""
    entry = bench_training(tiny_config(tiny_bert, tiny_data, tmp_path / "unused",
                                       cuda_graphs=True, graph_widths="32"), steps=3, warmup=1,
                           repeats=1)
    assert entry["graph_widths"] == [32] and entry["captured"] is False and entry["graphs"] == 0
    assert (entry["bench_mode"], entry["cuda_graphs"], entry["compile"]) == (
        "captured-fp32", True, False)
    assert entry["repeats"][0]["padded_tokens_per_s"] == pytest.approx(
        3 * 8 * 32 / entry["repeats"][0]["wall_s"], rel=1e-2, abs=0.1)   # rounded to 0.1


def test_losses_read_in_blocks_give_the_same_log_and_stop_at_the_bad_step(
        tmp_path, tiny_bert, tiny_data, monkeypatch):
    """The GPU path reads losses every few steps: same train_loss as every step, and a
    non-finite loss still stops the run, naming its step, before any later checkpoint."""
    import palkit.trainer.train as tt
    from palkit.trainer.train import train
    every_step = train(tiny_config(tiny_bert, tiny_data, tmp_path / "a"))
    monkeypatch.setattr(tt, "loss_sync_interval", lambda device: 3)
    blocks = train(tiny_config(tiny_bert, tiny_data, tmp_path / "b"))
    read = lambda run: [json.loads(x)["train_loss"]  # noqa: E731
                        for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert read(blocks) == read(every_step)

    poison_loss_at_call(monkeypatch, 6)
    with pytest.raises(TrainingError, match=r"loss became nan .* epoch 2, step 2;"):
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "nan"))
    state = json.loads((tmp_path / "nan" / "last" / "state.json").read_text())
    assert state["global_epoch"] == 1                     # epoch 1's checkpoint, nothing later


def test_compile_mode_is_checked_and_may_change_on_resume():
    from palkit.trainer.config import TrainConfig
    from palkit.trainer.train import RESUME_MAY_CHANGE
    assert TrainConfig(compile=True, compile_mode="reduce-overhead").compile_mode == "reduce-overhead"
    with pytest.raises(ValueError, match="compile_mode must be one of default, reduce-overhead, "
                                         "max-autotune, got 'fast'"):
        TrainConfig(compile_mode="fast")
    assert "compile_mode" in RESUME_MAY_CHANGE      # how a graph is run, not what it computes
