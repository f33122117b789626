"""palkit study: a study file becomes jobs (separate runs split per task, run: references become
dependencies), and the jobs train and score into the same layout palkit train writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from palkit import cli
from palkit.core.fileio import KILL_ENV
from palkit.core.options import DATA_DIR_ENV
from palkit.studies.plan import StudyError, plan_jobs, read_study
from palkit.trainer.checkpoint import separate_models
from testing_utils import assert_agrees_with_last, run_tree

TINY_STUDY = """
[base]
epochs = 1
steps_per_epoch = 2
batch_size = 4
max_len = 32
max_eval_examples = 8
device = "cpu"

[[run]]
name = "shared"
seeds = [0, 1]
options = { mode = "shared" }

[[run]]
name = "separate"
options = { mode = "separate", steps_per_epoch = 1 }

[[run]]
name = "distilled"
options = { mode = "pals", distill_from = "run:separate" }
"""


def write_study(tmp_path: Path, text: str = TINY_STUDY) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_plan_splits_separate_runs_and_orders_references(tmp_path: Path) -> None:
    jobs = plan_jobs(read_study(write_study(tmp_path)), tmp_path / "out", {"data_dir": "/d"})
    keys = [j.key for j in jobs]
    assert keys == ["shared/seed-0", "shared/seed-1", "separate/seed-0/sst",
                    "separate/seed-0/quora", "separate/seed-0/sts", "separate/seed-0",
                    "distilled/seed-0"]
    by_key = {j.key: j for j in jobs}
    sst = by_key["separate/seed-0/sst"]
    assert (sst.config.mode, sst.config.tasks, sst.config.steps_per_epoch) == ("shared", ("sst",), 1)
    assert sst.out == tmp_path / "out" / "separate" / "seed-0" / "models" / "sst"
    assert by_key["separate/seed-0"].after == ("separate/seed-0/sst", "separate/seed-0/quora",
                                               "separate/seed-0/sts")
    distilled = by_key["distilled/seed-0"]
    assert distilled.after == ("separate/seed-0",)
    assert distilled.config.distill_from == str(tmp_path / "out" / "separate" / "seed-0")
    assert by_key["shared/seed-1"].config.seed == 1
    assert all(j.config.data_dir == "/d" for j in jobs)


@pytest.mark.parametrize("text, message", [
    ("[base]\nepochs = 1\n", "no [[run]] tables"),
    ('[[run]]\nname = "a/b"\n', "needs a name"),
    ('[[run]]\nname = "a"\nseeds = "0"\n', "seeds must be a list of integers"),
    ('[[run]]\nname = "a"\n[[run]]\nname = "a"\n', "run names repeat"),
    ('[[run]]\nname = "a"\noptions = { epochs = "many" }\n', "run 'a/seed-0': options: 'epochs' must be an integer"),
    ('[[run]]\nname = "a"\noptions = { mode = "pals", pal_layers = "9,x" }\n', "run 'a/seed-0'"),
])
def test_bad_study_files_are_refused_with_the_run_and_field(tmp_path: Path, text: str,
                                                            message: str) -> None:
    with pytest.raises(StudyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan_jobs(read_study(write_study(tmp_path, text)), tmp_path / "out", {})


@pytest.mark.slow
def test_study_trains_scores_and_resumes(tmp_path: Path, tiny_bert: Path, tiny_data: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Every child command must be given the data folder: the default one is not there.
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "no-data-here"))
    study, out = write_study(tmp_path), tmp_path / "out"
    args = ["study", str(study), "--out", str(out), "--parallel", "3", "--threads-per-job", "1",
            "--base-model", str(tiny_bert), "--data-dir", str(tiny_data)]
    assert cli.main(args) == 0
    record = json.loads((out / "study.json").read_text())
    assert {j["status"] for j in record["jobs"]} == {"done"}
    separate = out / "separate" / "seed-0"
    assert [p.name for p in separate_models(separate)] == ["quora", "sst", "sts"]
    for run in ("shared/seed-0", "shared/seed-1", "separate/seed-0", "distilled/seed-0"):
        for split in ("dev", "test"):
            metrics = json.loads((out / run / f"{split}.json").read_text())
            assert 0.0 <= metrics["avg"] <= 1.0 and metrics["split"] == split
    assert json.loads((out / "separate" / "seed-0" / "config.json").read_text())["mode"] == "separate"
    # Seeds differ, so the two shared runs' weights differ.
    a, b = ((out / "shared" / s / "model" / "trunk" / "model.safetensors").read_bytes()
            for s in ("seed-0", "seed-1"))
    assert a != b
    # Started again, nothing is trained or scored again.
    stamp = (out / "shared" / "seed-0" / "test.json").stat().st_mtime_ns
    log = (out / "shared" / "seed-0.log").read_text()
    assert log.count("$ ") == 3   # train, evaluate dev, evaluate test
    assert cli.main(args) == 0
    assert (out / "shared" / "seed-0" / "test.json").stat().st_mtime_ns == stamp
    assert (out / "shared" / "seed-0.log").read_text() == log
    # The table: one row per configuration, seeds pooled, steps per model for separate runs.
    table = tmp_path / "converged"
    assert cli.main(["study-results", str(out), "--out", str(table), "--machine", "tiny"]) == 0
    rows = json.loads(table.with_suffix(".json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["shared", "separate", "distilled"]
    shared, separate, _ = rows
    assert shared["seeds"] == [0, 1] and shared["dev_avg"]["n"] == 2
    expected = sum(s["dev"]["avg"] for s in shared["per_seed"]) / 2 * 100
    assert shared["dev_avg"]["mean"] == pytest.approx(expected, abs=0.01)
    assert shared["test_avg"]["n"] == 2 and shared["total_steps"] == 2
    assert len(shared["per_seed"][0]["dev_curve"]) == 1
    assert separate["total_steps"] == {"sst": 1, "quora": 1, "sts": 1}
    assert "--mode separate --steps-per-epoch 1 --out" in separate["per_seed"][0]["command"]
    markdown = table.with_suffix(".md").read_text()
    assert "| shared | 2 |" in markdown and "1 + 1 + 1" in markdown


KILL_STUDY = """
[base]
epochs = 2
steps_per_epoch = 2
batch_size = 4
max_len = 32
max_eval_examples = 8
device = "cpu"

[[run]]
name = "pals"
options = { mode = "pals", pal_size = 8, pal_heads = 2 }
"""


def study_args(study: Path, out: Path, tiny_bert: Path, tiny_data: Path) -> list[str]:
    return ["study", str(study), "--out", str(out), "--parallel", "1", "--threads-per-job", "1",
            "--base-model", str(tiny_bert), "--data-dir", str(tiny_data)]


@pytest.mark.slow
def test_study_whose_job_is_killed_finishes_as_if_never_killed(
        tmp_path: Path, tiny_bert: Path, tiny_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job SIGKILLed (PALKIT_KILL_AT, inherited by the study's child processes) first before
    its first checkpoint, then again between epoch 1's metrics line and its checkpoint; the
    study started again each time. The run ends equal to an uninterrupted study's (nothing
    lost, no epoch twice), and each split is scored once."""
    study = write_study(tmp_path, KILL_STUDY)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert cli.main(study_args(study, straight, tiny_bert, tiny_data)) == 0
    for point in ("step:1", "metrics:1"):
        monkeypatch.setenv(KILL_ENV, point)
        assert cli.main(study_args(study, killed, tiny_bert, tiny_data)) == 2
        status = json.loads((killed / "study.json").read_text())["jobs"][0]["status"]
        assert status.startswith("failed (killed by SIGKILL); log "), status
        assert_agrees_with_last(killed / "pals" / "seed-0")
    monkeypatch.delenv(KILL_ENV)
    assert cli.main(study_args(study, killed, tiny_bert, tiny_data)) == 0
    assert run_tree(killed / "pals" / "seed-0") == run_tree(straight / "pals" / "seed-0")
    log = (killed / "pals" / "seed-0.log").read_text().splitlines()
    commands = [line.split()[4:] for line in log if line.startswith("$ ")]  # "$ python -m palkit.cli"
    assert [(c[0], "--resume" in c) for c in commands] == [("train", False), ("train", True),
                                                           ("train", True), ("evaluate", False),
                                                           ("evaluate", False)]
    assert [c[c.index("--split") + 1] for c in commands[3:]] == ["dev", "test"]
    straight_row, killed_row = (study_table(out, tmp_path) for out in (straight, killed))
    for row in (straight_row, killed_row):
        for seed in row["per_seed"]:
            del seed["train_s"], seed["command"]      # wall-clock time; the folder's own path
        del row["train_min"]
    assert killed_row == straight_row
    assert len(killed_row["per_seed"][0]["dev_curve"]) == 2   # one point per epoch


def study_table(out: Path, tmp_path: Path) -> dict:
    table = tmp_path / f"{out.name}-table"
    assert cli.main(["study-results", str(out), "--out", str(table), "--machine", "tiny"]) == 0
    (row,) = json.loads(table.with_suffix(".json").read_text())["rows"]
    return row
