"""Crash between every two steps of a publish; what a reader looks at must stay whole.

Every rename, folder swap, link swap and delete goes through one of core/fileio.py's
primitive steps. A run first counts the steps of a publish, then each step k in turn raises
instead of happening; afterwards the link (RUN/last, RUN/model) or the bundle folder must hold
either the previous snapshot or the new one, complete, file for file (SHA-256), and a retry
must publish the new one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable

import pytest
import torch

from palkit.core import fileio
from palkit.trainer.checkpoint import (Checkpoint, CheckpointError, TrainingState, link_run_files,
                                       load_model, save_best, save_checkpoint)

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
                      view: Callable[[Path], Path | dict[str, str]]) -> int:
    """Publish into copies of `pristine`, crashing at each step; `view(folder)` is what a reader
    opens (a folder, or its files' hashes). Returns the number of steps."""
    def seen(folder: Path) -> dict[str, str]:
        shown = view(folder)
        return shown if isinstance(shown, dict) else hashes(shown)

    def fresh() -> Path:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work, symlinks=True)
        return work

    before = seen(fresh())
    with monkeypatch.context() as m:
        calls = with_steps(m, None)
        publish(fresh())
    after, n = seen(work), calls["n"]
    published = sorted(p.name for p in work.iterdir())
    assert after != before and n >= 3
    for k in range(1, n + 1):
        folder = fresh()
        with monkeypatch.context() as m:
            with_steps(m, k)
            with pytest.raises(Crash):
                publish(folder)
        assert seen(folder) in (before, after), f"crash before step {k}/{n} left a broken snapshot"
        publish(folder)                                   # and a retry goes through
        assert seen(folder) == after
        assert sorted(p.name for p in folder.iterdir()) == published   # nothing left behind
    return n


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_pal_run: Path):
    return load_model(tiny_pal_run / "model")[:2]


def checkpoint_of(model, epoch: int, best: int | None = None) -> Checkpoint:
    """A checkpoint at the end of `epoch`, naming best-<best> and holding a line per epoch."""
    optimizer = {f"{n}.exp_avg": torch.zeros_like(p) for n, p in model.named_parameters()
                 if n.startswith("heads.")}   # AdamW's state of the heads, as saved
    state = TrainingState(global_epoch=epoch,
                          best=None if best is None else {"avg": 0.5, "epoch": best})
    return Checkpoint(state, optimizer, torch.get_rng_state(),
                      [f'{{"epoch": {e}}}' for e in range(1, epoch + 1)])


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


def epoch_view(run: Path) -> dict[str, str]:
    """What readers of a run open: the checkpoint, the best model and the metrics."""
    files = {f"last/{k}": v for k, v in hashes(run / "last").items()}
    files.update({f"model/{k}": v for k, v in hashes(run / "model").items()})
    files["metrics.jsonl"] = hashlib.sha256((run / "metrics.jsonl").read_bytes()).hexdigest()
    return files


def test_an_epochs_best_model_and_checkpoint_appear_together_at_every_crash(
        tmp_path, monkeypatch, model_and_tokenizer):
    """An epoch's publish as training does it: RUN/best-0002, then the checkpoint naming it
    and its metrics. After a crash at any step, RUN/model, RUN/last and RUN/metrics.jsonl are
    all still epoch 1's or all epoch 2's."""
    model, tok = model_and_tokenizer
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    link_run_files(pristine)
    save_best(pristine, 1, model, tok, None, {"avg": 0.5, "epoch": 1})
    first = checkpoint_of(model, 1, best=1)
    save_checkpoint(pristine, model, tok, None, first)
    new_model = changed(model)
    second = checkpoint_of(new_model, 2, best=2)

    def publish_epoch_2(run: Path) -> None:
        save_best(run, 2, new_model, tok, None, {"avg": 0.6, "epoch": 2})
        save_checkpoint(run, new_model, tok, None, second)

    check_every_crash(monkeypatch, pristine, tmp_path / "work", publish_epoch_2, epoch_view)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [
        "best-0002", "ckpt-0002-000000", "last", "metrics.jsonl", "model"]


def test_bundle_survives_a_crash_at_every_step(tmp_path, monkeypatch, tiny_pal_run, tiny_data):
    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    from palkit.runtime.bundle import load_bundle

    pristine = tmp_path / "pristine"
    export_run(tiny_pal_run, pristine / "bundle",
               ExportOptions(target="onnx", quant="fp32", tasks=["sst", "sts"], data_dir=tiny_data),
               log=lambda *a: None)
    check_every_crash(
        monkeypatch, pristine, tmp_path / "work",
        lambda parent: export_run(tiny_pal_run, parent / "bundle",
                                  ExportOptions(target="onnx", quant="fp32", tasks=["sst"], data_dir=tiny_data, overwrite=True),
                                  log=lambda *a: None),
        lambda parent: parent / "bundle")
    assert set(load_bundle(tmp_path / "work" / "bundle").tasks) == {"sst"}


def test_training_state_round_trips_and_is_read_strictly(tmp_path):
    state = TrainingState(phase=1, epoch=2, step=3, streams={"sst": 9}, best={"avg": 0.5})
    path = tmp_path / "state.json"
    path.write_text(json.dumps(dataclasses.asdict(state)))
    assert TrainingState.read(path) == state
    path.write_text(json.dumps({**dataclasses.asdict(state), "extra": 1}))
    with pytest.raises(CheckpointError, match=r"state.json: keys \['extra'\] do not match"):
        TrainingState.read(path)
