"""Kill a run at each named point and resume it: the folder must end equal to an uninterrupted
run's (weights, optimizer and RNG state bit for bit; metrics.jsonl, the `model` link,
summary.json), and at the instant of the kill RUN/metrics.jsonl and RUN/model must agree with
RUN/last. The points are core/fileio.py's kill_point calls (PALKIT_KILL_AT); the killed run
is a forked process that SIGKILLs itself there, so where it dies never depends on timing."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from palkit.trainer.add_task import AddTaskOptions, add_task
from palkit.trainer.config import TrainConfig
from palkit.trainer.tasks import BUILTIN_TASKS
from palkit.trainer.train import train
from testing_utils import assert_agrees_with_last, killed_at, run_tree, tiny_config

# Two tasks, joint then one tune phase each: 4 epochs of 4 steps, a checkpoint every 2 steps
# (so 8 checkpoints: mid-epoch and end of epoch, alternately).
PHASES = ["joint", "joint", "tune:sst", "tune:sts"]

TRAIN_POINTS = [
    pytest.param("step:1", id="first-step-before-any-checkpoint"),
    pytest.param("step:3", id="step-after-a-mid-epoch-checkpoint"),
    pytest.param("dev:1", id="dev-scoring"),
    pytest.param("metrics:1", id="metrics-line-made-checkpoint-not"),
    pytest.param("best:1", id="best-model-half-written"),
    pytest.param("best-placed:1", id="best-model-written-checkpoint-not"),
    pytest.param("checkpoint:2", id="checkpoint-half-written"),
    pytest.param("checkpoint-placed:2", id="checkpoint-written-last-not-moved"),
    pytest.param("checkpoint-linked:2", id="last-moved-old-checkpoint-not-deleted"),
    pytest.param("metrics:2", id="second-epoch-metrics-line"),
    pytest.param("tune:1", id="tune-phase-loaded-best-model"),
    pytest.param("step:11", id="tune-phase-step"),
    pytest.param("metrics:3", id="tune-phase-metrics-line"),
    pytest.param("checkpoint-linked:8", id="final-checkpoint-not-yet-marked-finished"),
]


def run_config(tiny_bert: Path, tiny_data: Path, out: Path) -> TrainConfig:
    return tiny_config(tiny_bert, tiny_data, out, tasks=("sst", "sts"), tune_adapters_after=1,
                       save_every=2)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_bert: Path, tiny_data: Path) -> Path:
    return train(run_config(tiny_bert, tiny_data, tmp_path_factory.mktemp("straight") / "run"))


@pytest.mark.parametrize("point", TRAIN_POINTS)
def test_training_killed_at_a_point_resumes_to_the_uninterrupted_run(
        tmp_path, tiny_bert, tiny_data, uninterrupted, point):
    cfg = run_config(tiny_bert, tiny_data, tmp_path / "run")
    killed_at(point, train, cfg)
    assert_agrees_with_last(tmp_path / "run")
    train(cfg, resume=True)
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["phase"] for x in metrics] == PHASES
    assert run_tree(tmp_path / "run") == run_tree(uninterrupted)


# ---- add-task --------------------------------------------------------------------------------

ADD_OPTIONS = AddTaskOptions(epochs=1, steps_per_epoch=4, batch_size=8, save_every=2)


@pytest.fixture(scope="module")
def added_uninterrupted(tmp_path_factory, tiny_pal_run: Path, tiny_data: Path) -> Path:
    run = tmp_path_factory.mktemp("added") / "run"
    shutil.copytree(tiny_pal_run, run, symlinks=True)
    add_task(run, BUILTIN_TASKS["cfimdb"], str(tiny_data), ADD_OPTIONS)
    return run


@pytest.mark.parametrize("point", [
    pytest.param("step:1", id="first-step-before-any-checkpoint"),
    pytest.param("metrics:1", id="metrics-line-made-checkpoint-not"),
    pytest.param("checkpoint-linked:2", id="final-checkpoint-not-yet-marked-finished"),
    pytest.param("add-task", id="task-staged-not-published"),
    pytest.param("add-task-placed", id="task-published-command-not-returned"),
])
def test_add_task_killed_at_a_point_resumes_to_the_uninterrupted_add(
        tmp_path, tiny_pal_run, tiny_data, added_uninterrupted, point):
    run = tmp_path / "run"
    shutil.copytree(tiny_pal_run, run, symlinks=True)
    killed_at(point, add_task, run, BUILTIN_TASKS["cfimdb"], str(tiny_data), ADD_OPTIONS)
    if (run / "added" / "cfimdb").is_dir():
        assert_agrees_with_last(run / "added" / "cfimdb")
    target = add_task(run, BUILTIN_TASKS["cfimdb"], str(tiny_data), ADD_OPTIONS, resume=True)
    assert target == run / "model" / "tasks" / "cfimdb"
    assert run_tree(run) == run_tree(added_uninterrupted)


def test_run_killed_in_the_old_layout_resumes_to_the_uninterrupted_run(
        tmp_path, tiny_bert, tiny_data, uninterrupted):
    """A run written before RUN/metrics.jsonl and RUN/model resolved through RUN/last (the file
    then held a line past the checkpoint, the issue-37 repeat) resumes to the same folder."""
    run = tmp_path / "run"
    cfg = run_config(tiny_bert, tiny_data, run)
    killed_at("step:7", train, cfg)          # epoch 2, after its step-2 checkpoint
    lines = (run / "metrics.jsonl").read_text()
    assert len(lines.splitlines()) == 1
    for name in ("metrics.jsonl", "model"):
        (run / name).unlink()
    (run / "metrics.jsonl").write_text(lines + lines.replace('"epoch": 1', '"epoch": 2'))
    (run / "model").symlink_to("best-0001")
    (run / "last" / "metrics.jsonl").unlink()
    (run / "last" / "best").unlink()
    train(cfg, resume=True)
    assert run_tree(run) == run_tree(uninterrupted)


def test_separate_run_killed_in_its_second_task_resumes_to_the_uninterrupted_run(
        tmp_path_factory, tmp_path, tiny_bert, tiny_data):
    """--mode separate: one run per task, the second killed half-way through writing its best
    model (before its first checkpoint), then the whole run resumed."""
    def config(out: Path) -> TrainConfig:
        return tiny_config(tiny_bert, tiny_data, out, mode="separate", tasks=("sst", "sts"),
                           epochs=1, steps_per_epoch=2)
    straight = train(config(tmp_path_factory.mktemp("separate") / "run"))
    cfg = config(tmp_path / "run")
    killed_at("best:2", train, cfg)
    assert_agrees_with_last(tmp_path / "run" / "models" / "sts")
    train(cfg, resume=True)
    assert run_tree(tmp_path / "run") == run_tree(straight)
