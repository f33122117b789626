"""The graph-ready training step (trainer/step.py) computes what the plain eager step computed.

On a CPU the step runs uncaptured through the same code a CUDA graph records: static input
buffers per (task, width), the learning rate as a tensor, one AdamW for the trunk and one per
task. These tests hold it bit for bit to the eager step as it was written before (one AdamW over
every parameter, a Python-float learning rate, gradients set to None each step), over many steps
of three tasks, and through kill -9 / --resume. Capture itself needs CUDA (last test)."""
from __future__ import annotations

import json
import signal

import pytest
import torch

from palkit.trainer.config import TrainConfig, parse_widths
from palkit.trainer.sampling import epoch_task_schedule
from palkit.trainer.train import Run, TrainingError, task_loss, train
from testing_utils import finish, run_tree, tensors_of, tiny_config, train_cli

STEPS = 24


def eager_reference(run: Run, steps: int) -> dict[str, torch.Tensor]:
    """The eager step as it was before trainer/step.py, spelled out: returns the weights and the
    optimizer's state after `steps` steps of the joint phase."""
    cfg, phase = run.cfg, run.phases[0]
    ctx = run.phase_context(phase)
    for p in run.model.parameters():
        p.grad = None
    params = {n: p for n, p in run.model.named_parameters() if p.requires_grad}
    plain = lambda n: n.endswith("bias") or "LayerNorm" in n  # noqa: E731
    opt = torch.optim.AdamW([{"params": [p for n, p in params.items() if not plain(n)],
                              "weight_decay": cfg.weight_decay},
                             {"params": [p for n, p in params.items() if plain(n)],
                              "weight_decay": 0.0}], lr=cfg.lr, fused=True)
    total = phase.epochs * cfg.steps_per_epoch
    warmup = max(1, int(cfg.warmup_ratio * total))
    schedule = epoch_task_schedule(cfg.sampling, ctx.sizes, 1, phase.epochs, steps, cfg.seed)
    for step, task_index in enumerate(schedule):
        lr = (cfg.lr * (step + 1) / warmup if step < warmup
              else cfg.lr * max(0.0, (total - step) / max(1, total - warmup)))
        for group in opt.param_groups:
            group["lr"] = lr
        spec = ctx.specs[task_index]
        batch = run.batch(spec, ctx.streams[spec.name])
        raw = run.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                        task=spec.name)
        loss = task_loss(spec, raw, batch["labels"], cfg.sts_loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        with_grad = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(with_grad, cfg.max_grad_norm)
        opt.step()
    name_of = {id(p): n for n, p in params.items()}
    state = {f"{name_of[id(p)]}.{k}": v.clone() for p, s in opt.state.items() for k, v in s.items()}
    return {**{n: p.detach().clone() for n, p in params.items()}, **state}


def graph_ready(run: Run, steps: int) -> dict[str, torch.Tensor]:
    """The same steps through TrainStep, as the training loop calls it."""
    cfg, phase = run.cfg, run.phases[0]
    ctx = run.phase_context(phase)
    schedule = epoch_task_schedule(cfg.sampling, ctx.sizes, 1, phase.epochs, steps, cfg.seed)
    losses = []
    for step, task_index in enumerate(schedule):
        spec = ctx.specs[task_index]
        losses.append(ctx.step(spec, run.batch(spec, ctx.streams[spec.name]), step))
    assert torch.isfinite(torch.stack(losses)).all()
    params = {n: p for n, p in run.model.named_parameters() if p.requires_grad}
    return {**{n: p.detach().clone() for n, p in params.items()}, **ctx.opts.state_tensors()}


def assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k].to(a[k].dtype))]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def run_steps(cfg: TrainConfig, how, steps: int = STEPS) -> dict[str, torch.Tensor]:
    run = Run(cfg, resume=False)
    torch.manual_seed(1234)           # dropout draws the same numbers in both
    return how(run, steps)


@pytest.mark.parametrize("options", [
    {},                                                        # eager, per-batch widths
    {"cuda_graphs": True, "graph_widths": ",".join(map(str, range(1, 33)))},  # static buffers
    {"mode": "shared", "cuda_graphs": True, "graph_widths": ",".join(map(str, range(1, 33)))},
])
def test_graph_ready_step_equals_the_eager_step_bit_for_bit(tmp_path, tiny_bert, tiny_data,
                                                             options):
    """24 annealed steps of three tasks, clipping active (max norm 0.05): same weights, same
    AdamW moments and step counts. Every width from 1 to max_len is a graph width here, so each
    batch keeps its own width and only the static path's machinery is under test."""
    cfg = tiny_config(tiny_bert, tiny_data, tmp_path / "unused", max_grad_norm=0.05,
                      epochs=3, steps_per_epoch=10, **options)
    assert_identical(run_steps(cfg, eager_reference), run_steps(cfg, graph_ready))


def test_a_step_of_one_task_leaves_the_other_tasks_untouched(tmp_path, tiny_bert, tiny_data):
    run = Run(tiny_config(tiny_bert, tiny_data, tmp_path / "unused", cuda_graphs=True), False)
    ctx = run.phase_context(run.phases[0])
    for position, spec in enumerate(ctx.specs):      # every task once: moments exist
        ctx.step(spec, run.batch(spec, ctx.streams[spec.name]), position)
    before = {n: t.clone() for n, t in ctx.opts.state_tensors().items()}
    weights = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    sst = ctx.specs[0]
    ctx.step(sst, run.batch(sst, ctx.streams["sst"]), 3)
    after = ctx.opts.state_tensors()
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    moved = {n for n, p in run.model.named_parameters() if not torch.equal(weights[n], p)}
    others = ("adapters.quora", "adapters.sts", "heads.quora", "heads.sts")
    assert any(n.startswith("trunk.") for n in moved) and any("sst" in n for n in moved)
    assert not [n for n in moved | changed if n.startswith(others)]
    assert any(n.startswith("adapters.sst") for n in changed)


def test_padding_to_fixed_widths_changes_only_rounding(tmp_path, tiny_bert, tiny_data):
    """Padded positions are masked out, so with dropout off a batch padded to a wider width
    gives the same loss and gradients up to float rounding (the softmax and matmul kernels sum
    over a different length). With dropout on, a wider batch draws a dropout mask of another
    shape, so the numbers differ as another seed's would."""
    run = Run(tiny_config(tiny_bert, tiny_data, tmp_path / "unused"), False)
    for m in run.model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if hasattr(m, "dropout") and isinstance(m.dropout, float):
            m.dropout = 0.0
    run.model.trunk.config.attention_probs_dropout_prob = 0.0
    ctx = run.phase_context(run.phases[0])
    for spec in ctx.specs:
        split = run.train_splits[spec.name]
        rows = torch.tensor(ctx.streams[spec.name].take(run.cfg.batch_size))
        results = []
        for width in (split.width(rows), 32):
            run.model.zero_grad(set_to_none=True)
            wide = split.gather(rows, width)
            loss = task_loss(spec, run.model(wide["input_ids"], wide["attention_mask"],
                                             wide["token_type_ids"], task=spec.name),
                             wide["labels"], run.cfg.sts_loss)
            loss.backward()
            results.append((loss.detach(), [p.grad.clone() for p in run.model.parameters()
                                            if p.grad is not None]))
        (narrow_loss, narrow_grads), (wide_loss, wide_grads) = results
        torch.testing.assert_close(wide_loss, narrow_loss, rtol=1e-5, atol=1e-6)
        for a, b in zip(narrow_grads, wide_grads):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_graph_widths_and_refusals():
    assert parse_widths("", 128) == (32, 64, 96, 128)
    assert parse_widths("", 64) == (16, 32, 48, 64)
    assert parse_widths("48,16", 64) == (16, 48, 64)
    assert TrainConfig(cuda_graphs=True).pad_widths() == (16, 32, 48, 64)
    assert TrainConfig().pad_widths() is None
    with pytest.raises(ValueError, match=r"graph_widths must lie between 1 and max_len \(64\)"):
        TrainConfig(graph_widths="32,96")
    with pytest.raises(ValueError, match="graph_widths must be comma-separated integers"):
        TrainConfig(graph_widths="32;64")
    with pytest.raises(ValueError, match="drop one of them"):
        TrainConfig(cuda_graphs=True, grad_surgery="pcgrad")
    with pytest.raises(ValueError, match="use compile_mode 'default'"):
        TrainConfig(cuda_graphs=True, compile=True, compile_mode="reduce-overhead")


def test_cuda_graphs_with_several_processes_is_refused_in_one_line(tmp_path, tiny_bert, tiny_data,
                                                                   monkeypatch):
    import palkit.trainer.train as tt
    from palkit.trainer.devices import Dist
    monkeypatch.setattr(tt, "setup_distributed", lambda cfg: Dist(0, 2, torch.device("cpu")))
    with pytest.raises(TrainingError) as e:
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "ddp", cuda_graphs=True))
    assert "\n" not in str(e.value) and "without torchrun" in str(e.value)


@pytest.mark.slow
def test_cuda_graphs_run_equals_plain_run_and_survives_kill_minus_nine(tmp_path, tiny_bert,
                                                                      tiny_data):
    """End to end on a CPU, joint and tune phases: `train --cuda-graphs` with every width a
    graph width ends bit-identical to plain `train`; with coarse widths (8,16,24,32) a run
    killed with SIGKILL mid-epoch and resumed ends bit-identical to the same run uninterrupted."""
    common = ["--base-model", str(tiny_bert), "--data-dir", str(tiny_data), "--epochs", "2",
              "--steps-per-epoch", "6", "--save-every", "2", "--batch-size", "8", "--max-len",
              "32", "--pal-size", "8", "--pal-heads", "2", "--lr", "1e-3", "--device", "cpu",
              "--tune-adapters-after", "1"]
    every_width = ["--cuda-graphs", "--graph-widths", ",".join(map(str, range(1, 33)))]
    coarse = ["--cuda-graphs", "--graph-widths", "8,16,24"]
    plain = train_cli([*common, "--out", str(tmp_path / "plain")])
    static = train_cli([*common, *every_width, "--out", str(tmp_path / "static")])
    straight = train_cli([*common, *coarse, "--out", str(tmp_path / "straight")])
    victim = train_cli([*common, *coarse, "--out", str(tmp_path / "victim")], kill_at="step:3")
    assert finish(victim) == -signal.SIGKILL          # mid-epoch, after the step-2 checkpoint
    resumed = train_cli([*common, *coarse, "--out", str(tmp_path / "victim"), "--resume"])
    for proc in (plain, static, straight, resumed):
        assert finish(proc) == 0
    a, b = tensors_of(tmp_path / "plain" / "last"), tensors_of(tmp_path / "static" / "last")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c, d = tensors_of(tmp_path / "straight" / "last"), tensors_of(tmp_path / "victim" / "last")
    assert c.keys() == d.keys() and all(torch.equal(c[k], d[k]) for k in c)
    assert any(not torch.equal(a[k], c[k]) for k in a)    # coarse widths: other dropout masks
    phases = [json.loads(x)["phase"] for x in (tmp_path / "victim" / "metrics.jsonl")
              .read_text().splitlines()]
    assert phases == ["joint", "joint", "tune:sst", "tune:quora", "tune:sts"]
    assert run_tree(tmp_path / "victim") == run_tree(tmp_path / "straight")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="capture needs a CUDA device")
def test_captured_step_replays_and_dropout_draws_fresh_masks(tmp_path, tiny_bert, tiny_data):
    """On a GPU: one (task, width) is captured once after its eager warm-up steps and replayed
    after that, training as it goes; and a captured dropout draws a new mask on every replay
    (each replay advances the generator's philox offset)."""
    x = torch.ones(4096, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torch.nn.functional.dropout(x, 0.5, training=True)
    graph.replay()
    first = y.clone()
    graph.replay()
    assert not torch.equal(first, y) and 0.3 < (y == 0).float().mean() < 0.7

    cfg = tiny_config(tiny_bert, tiny_data, tmp_path / "unused", device="cuda",
                      cuda_graphs=True, graph_widths="32", epochs=3, steps_per_epoch=10)
    run = Run(cfg, resume=False)
    ctx = run.phase_context(run.phases[0])
    spec = ctx.specs[0]
    batch = run.batch(spec, ctx.streams[spec.name])
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    losses = torch.stack([ctx.step(spec, batch, i) for i in range(6)])
    assert run.graphs.count == 1 and run.graphs.capture_s > 0
    assert torch.isfinite(losses).all() and len(set(losses.tolist())) == 6
    moved = {n for n, p in run.model.named_parameters() if not torch.equal(before[n], p)}
    assert any(n.startswith("trunk.") for n in moved) and not any("quora" in n for n in moved)
