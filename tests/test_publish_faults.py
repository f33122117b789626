"""Crash between every two steps of a publish; what a reader looks at must stay whole.

Every rename, folder swap, link swap and delete goes through one of trainer/fileio.py's
primitive steps. A run first counts the steps of a publish, then each step k in turn raises
instead of happening; afterwards the link (RUN/last, RUN/model) or the bundle folder must hold
either the previous snapshot or the new one, complete, file for file (SHA-256), and a retry
must publish the new one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Callable

import pytest
import torch

from trainer import fileio
from trainer.checkpoint import (Checkpoint, CheckpointError, TrainingState, load_model, optimizer_tensors,
                                save_best, save_checkpoint)

STEPS = ("_rename", "_exchange", "_swap_link", "remove_tree")


class Crash(Exception):
    pass


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def with_steps(monkeypatch, crash_at: int | None) -> dict[str, int]:
    """Wrap fileio's primitive steps: count them; raise Crash instead of step `crash_at`."""
    calls = {"n": 0}
    for name in STEPS:
        real = getattr(fileio, name)

        def step(*args, _real=real):
            calls["n"] += 1
            if calls["n"] == crash_at:
                raise Crash(f"crash before step {crash_at}")
            return _real(*args)

        monkeypatch.setattr(fileio, name, step)
    return calls


def check_every_crash(monkeypatch, pristine: Path, work: Path, publish: Callable[[Path], None],
                      view: Callable[[Path], Path]) -> int:
    """Publish into copies of `pristine`, crashing at each step; `view(folder)` is what a reader
    opens. Returns the number of steps."""
    def fresh() -> Path:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work, symlinks=True)
        return work

    before = hashes(view(fresh()))
    with monkeypatch.context() as m:
        calls = with_steps(m, None)
        publish(fresh())
    after, n = hashes(view(work)), calls["n"]
    assert after != before and n >= 3
    for k in range(1, n + 1):
        folder = fresh()
        with monkeypatch.context() as m:
            with_steps(m, k)
            with pytest.raises(Crash):
                publish(folder)
        seen = hashes(view(folder))
        assert seen in (before, after), f"crash before step {k}/{n} left a broken snapshot"
        publish(folder)                                   # and a retry goes through
        assert hashes(view(folder)) == after
    return n


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_pal_run: Path):
    return load_model(tiny_pal_run / "model")[:2]


def checkpoint_of(model, epoch: int) -> Checkpoint:
    names = [n for n, _ in model.named_parameters()]
    opt = torch.optim.AdamW(model.parameters())
    return Checkpoint(TrainingState(global_epoch=epoch), optimizer_tensors(opt, names),
                      torch.get_rng_state())


def changed(model):
    """A copy of the model whose sst head differs, so the new snapshot's bytes differ."""
    import copy
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.heads["sst"].out.bias.add_(1.0)
    return other


@pytest.mark.parametrize("epoch", [1, 2], ids=["same-tag", "new-tag"])
def test_training_checkpoint_survives_a_crash_at_every_step(tmp_path, monkeypatch,
                                                            model_and_tokenizer, epoch):
    model, tok = model_and_tokenizer
    pristine = tmp_path / "pristine"
    save_checkpoint(pristine, model, tok, None, checkpoint_of(model, 1))
    new_model = changed(model)
    n = check_every_crash(
        monkeypatch, pristine, tmp_path / "work",
        lambda run: save_checkpoint(run, new_model, tok, None, checkpoint_of(new_model, epoch)),
        lambda run: run / "last")
    assert n >= 4


@pytest.mark.parametrize("epoch", [1, 2], ids=["same-tag", "new-tag"])
def test_best_model_survives_a_crash_at_every_step(tmp_path, monkeypatch, model_and_tokenizer,
                                                   epoch):
    model, tok = model_and_tokenizer
    pristine = tmp_path / "pristine"
    save_best(pristine, 1, model, tok, None, {"avg": 0.5})
    new_model = changed(model)
    check_every_crash(monkeypatch, pristine, tmp_path / "work",
                      lambda run: save_best(run, epoch, new_model, tok, None, {"avg": 0.6}),
                      lambda run: run / "model")


def test_bundle_survives_a_crash_at_every_step(tmp_path, monkeypatch, tiny_pal_run, tiny_data):
    from export.bundle import export_run
    from export.runtime import load_bundle

    pristine = tmp_path / "pristine"
    export_run(tiny_pal_run, pristine / "bundle", target="onnx", quant="fp32",
               tasks=["sst", "sts"], data_dir=tiny_data, log=lambda *a: None)
    check_every_crash(
        monkeypatch, pristine, tmp_path / "work",
        lambda parent: export_run(tiny_pal_run, parent / "bundle", target="onnx", quant="fp32",
                                  tasks=["sst"], data_dir=tiny_data, log=lambda *a: None,
                                  overwrite=True),
        lambda parent: parent / "bundle")
    assert set(load_bundle(tmp_path / "work" / "bundle").tasks) == {"sst"}


def test_training_state_round_trips_and_is_read_strictly():
    state = TrainingState(phase=1, epoch=2, step=3, streams={"sst": 9}, best={"avg": 0.5})
    assert TrainingState.from_dict(dataclasses.asdict(state), "state.json") == state
    with pytest.raises(CheckpointError, match=r"state.json: keys \['extra'\] do not match"):
        TrainingState.from_dict({**dataclasses.asdict(state), "extra": 1}, "state.json")
