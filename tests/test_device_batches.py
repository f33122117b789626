"""The training data held on the device (trainer/data.py TrainingSplit, Run.batch) gives the
batches that `collate` built row by row on the host, tensor for tensor, and a CPU training run
ends with the weights the host pipeline gave it (spelled out here as it was)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import palkit.trainer.train as tt
from palkit.trainer.data import collate
from palkit.trainer.sampling import TaskStream
from palkit.trainer.step import width_for
from palkit.trainer.devices import Dist
from palkit.trainer.train import Run, train
from testing_utils import tensors_of, tiny_config

BATCHES = 30    # 30 batches of 8 over 48 rows per task: five passes, batches straddling them


def host_batch(run: Run, spec, stream: TaskStream) -> dict[str, torch.Tensor]:
    """Run.batch before the data went to the device: `collate` on the host, padded up to the
    graph width and copied into the (task, width)'s input tensors when there are widths."""
    b, rank, world = run.cfg.batch_size, run.dist.rank, run.dist.world
    indices = stream.take(b * world)[rank * b:(rank + 1) * b]
    batch = collate(run.train_data[spec.name], indices, run.pad_id, run.pad_multiple)
    batch = {k: v.to(run.dist.device) for k, v in batch.items()}
    widths = run.cfg.pad_widths()
    if widths is None:
        return batch
    width = width_for(batch["input_ids"].shape[1], widths)
    extra = width - batch["input_ids"].shape[1]
    batch = {**batch, "input_ids": F.pad(batch["input_ids"], (0, extra), value=run.pad_id),
             "token_type_ids": F.pad(batch["token_type_ids"], (0, extra)),
             "attention_mask": F.pad(batch["attention_mask"], (0, extra))}
    inputs = run.graphs.inputs.setdefault((spec.name, width),
                                          {k: torch.empty_like(v) for k, v in batch.items()})
    for k, v in batch.items():
        inputs[k].copy_(v)
    return inputs


def streams(run: Run) -> dict[str, TaskStream]:
    """The joint phase's data streams, as Run.phase_context makes them (without the model's
    DDP wrapper, which needs a process group)."""
    names = [s.name for s in run.specs]
    return {name: TaskStream(len(run.train_data[name]), run.cfg.seed, i, 0, run._buckets(name))
            for i, name in enumerate(names)}


@pytest.mark.parametrize("options", [
    {},                                      # each batch padded to its own longest row
    {"length_buckets": 2},                   # length-sorted runs of batches
    {"compile": True},                       # widths rounded up to 16 (the batches only)
    {"graph_widths": "12,16,20"},            # into the (task, width) inputs, as with graphs
    {"graph_widths": "6,12,18", "length_buckets": 3, "max_len": 24},
    {"max_train_examples": 45, "length_buckets": 2},     # passes end mid-batch
], ids=["plain", "buckets", "compile-widths", "graph-widths", "graphs-buckets", "ragged-passes"])
@pytest.mark.parametrize("rank", [None, 1])
def test_device_batches_equal_collate_over_several_passes_of_every_task(
        tmp_path, tiny_bert, tiny_data, monkeypatch, options, rank):
    """sst (one text, 5 classes), quora (pairs, 0/1) and sts (pairs, regression scores): every
    batch of five passes equals the host pipeline's in values, dtype and shape; with rank 1 of
    2 processes, each step keeps the second half of the global batch (the DDP shard)."""
    if rank is not None:
        monkeypatch.setattr(tt, "setup_distributed", lambda cfg: Dist(rank, 2, torch.device("cpu")))
    cfg = tiny_config(tiny_bert, tiny_data, tmp_path / "unused", **options)
    run = Run(cfg, resume=False)
    reference = Run(cfg, resume=False)
    ours, theirs = streams(run), streams(reference)
    labels_seen = set()
    for spec in run.specs:
        for _ in range(BATCHES):
            got = run.batch(spec, ours[spec.name])
            want = host_batch(reference, spec, theirs[spec.name])
            assert got.keys() == want.keys()
            for key in want:
                assert got[key].dtype == want[key].dtype, (spec.name, key)
                assert torch.equal(got[key], want[key]), (spec.name, key)
            labels_seen.add((spec.name, got["labels"].dtype, bool((got["labels"] % 1).any())))
        assert ours[spec.name].drawn == BATCHES * cfg.batch_size * (2 if rank else 1)
    assert ("sts", torch.float32, True) in labels_seen   # regression scores went through


def test_training_on_a_cpu_ends_with_the_host_pipelines_weights(tmp_path, tiny_bert, tiny_data,
                                                                 monkeypatch):
    """Joint and adapter-tuning phases, length buckets, a checkpoint mid-epoch: the same weights,
    bit for bit, eager and through the graphs' input tensors (coarse widths)."""
    def trained(name: str, host: bool, **options) -> dict[str, torch.Tensor]:
        cfg = tiny_config(tiny_bert, tiny_data, tmp_path / name, epochs=2, steps_per_epoch=6,
                          save_every=4, tune_adapters_after=1, length_buckets=2, **options)
        with monkeypatch.context() as patch:
            if host:
                patch.setattr(Run, "batch", host_batch)
            train(cfg)
        return tensors_of(tmp_path / name / "last")

    for options in ({}, {"cuda_graphs": True, "graph_widths": "8,16,24"}):
        label = "graphs" if options else "eager"
        device, host = trained(f"{label}-device", False, **options), trained(f"{label}-host", True,
                                                                           **options)
        assert device.keys() == host.keys()
        assert all(torch.equal(device[k], host[k]) for k in host), label


def test_gather_writes_into_the_graph_inputs_and_a_foreign_batch_is_refused(
        tmp_path, tiny_bert, tiny_data):
    run = Run(tiny_config(tiny_bert, tiny_data, tmp_path / "unused", cuda_graphs=True,
                          graph_widths="32"), resume=False)
    ctx = run.phase_context(run.phases[0])
    sst = ctx.specs[0]
    first = run.batch(sst, ctx.streams["sst"])
    held = {k: v.clone() for k, v in first.items()}
    tensors = {k: v.data_ptr() for k, v in first.items()}
    second = run.batch(sst, ctx.streams["sst"])
    assert second is first and run.graphs.inputs == {("sst", 32): first}
    assert {k: v.data_ptr() for k, v in second.items()} == tensors    # written in place
    assert not torch.equal(held["input_ids"], second["input_ids"])    # with the next rows
    with pytest.raises(ValueError, match=r"gathered into the input tensors of \('sst', 32\)"):
        ctx.step(sst, held, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_split_lives_there_and_each_replay_reads_the_gathered_batch(
        tmp_path, tiny_bert, tiny_data):
    """By default on CUDA the step is captured (not compiled: a short run); the split is on the
    GPU and its lengths on the host too; every step's batch, gathered into the graph's inputs,
    equals the host pipeline's, and the replays train on them."""
    cfg = tiny_config(tiny_bert, tiny_data, tmp_path / "unused", device="cuda",
                      graph_widths="32", epochs=3, steps_per_epoch=10)
    run, reference = Run(cfg, resume=False), Run(cfg, resume=False)
    assert (run.cfg.cuda_graphs, run.cfg.compile) == (True, False)
    split = run.train_splits["sst"]
    assert split.input_ids.is_cuda and split.labels.is_cuda and not split.host_lengths.is_cuda
    ctx = run.phase_context(run.phases[0])
    theirs = streams(reference)
    spec = ctx.specs[0]
    losses = []
    for position in range(8):
        batch = run.batch(spec, ctx.streams[spec.name])
        want = host_batch(reference, spec, theirs[spec.name])
        assert all(torch.equal(batch[k], want[k]) for k in want)
        losses.append(ctx.step(spec, batch, position))
    assert run.graphs.count == 1
    losses = torch.stack(losses)
    assert torch.isfinite(losses).all() and len(set(losses.tolist())) == 8
