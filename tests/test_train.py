"""Training end to end on tiny models: the run-directory contract, modes, phases, resume, faults."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertModel

from palkit import cli
from palkit.trainer.checkpoint import load_model, sha256_file
from palkit.trainer.config import TrainConfig, build_config
from palkit.trainer.train import TrainingError, train
from testing_utils import (HANG_GUARD_S, REPO, assert_agrees_with_last, finish, poison_loss_at_call,
                           run_tree, tensors_of, tiny_config, train_cli)


def test_run_directory_contract(tiny_pal_run: Path, tiny_bert: Path):
    run = tiny_pal_run
    config = json.loads((run / "config.json").read_text())
    assert config["mode"] == "pals" and config["tasks"] == ["sst", "quora", "sts"]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2]
    assert {"sst_acc", "quora_acc", "quora_f1", "sts_pearson", "sts_spearman", "avg"} <= set(lines[0]["dev"])
    assert lines[0]["alpha"] == 1.0 and lines[1]["alpha"] == pytest.approx(0.2)

    model_dir = run / "model"
    BertModel.from_pretrained(model_dir / "trunk")          # transformers loads the trunk folder
    assert (model_dir / "trunk" / "vocab.txt").is_file()
    trunk_sha = sha256_file(model_dir / "trunk" / "model.safetensors")
    kinds = {}
    for task in ("sst", "quora", "sts"):
        cfg = json.loads((model_dir / "tasks" / task / "adapter_config.json").read_text())
        assert cfg["trunk_sha256"] == trunk_sha
        assert cfg["pal"] == {"size": 8, "heads": 2, "layers": [0, 1], "share_projections": True}
        kinds[task] = cfg["task"]["kind"]
        keys = load_file(model_dir / "tasks" / task / "adapter.safetensors").keys()
        assert any(k.startswith("pal.encoders.0") for k in keys) and "head.out.weight" in keys
    assert kinds == {"sst": "single_classification", "quora": "pair_classification",
                     "sts": "pair_regression"}
    summary = json.loads((model_dir / "summary.json").read_text())
    assert summary["avg"] == max(x["dev"]["avg"] for x in lines)
    # Never pickle: every weight file is safetensors, everything else JSON.
    suffixes = {p.suffix for p in run.rglob("*") if p.is_file()}
    assert suffixes <= {".json", ".jsonl", ".safetensors", ".txt"}, suffixes


def test_evaluate_command_writes_metrics_json(tiny_pal_run: Path, tiny_data: Path, capsys):
    out = tiny_pal_run / "eval-test.json"
    assert cli.main(["evaluate", str(tiny_pal_run), "--split", "test", "--data-dir",
                     str(tiny_data), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {"sst_acc", "quora_acc", "quora_f1", "sts_pearson", "sts_spearman", "avg"} <= set(result)
    expected = (result["sst_acc"] + result["quora_acc"] + (result["sts_pearson"] + 1) / 2) / 3
    assert result["avg"] == pytest.approx(expected)
    table = capsys.readouterr().out          # a table in points; the JSON goes to --out
    for value in (result["sst_acc"], result["quora_f1"], result["sts_pearson"], result["avg"]):
        assert f"{100 * value:.1f}" in table
    assert str(out) in table


def test_shared_mode_heads_only_and_separate_mode_full_models(tmp_path, tiny_bert, tiny_data):
    shared = train(tiny_config(tiny_bert, tiny_data, tmp_path / "shared", mode="shared", epochs=1))
    keys = load_file(shared / "model" / "tasks" / "sst" / "adapter.safetensors").keys()
    assert set(keys) == {"head.out.weight", "head.out.bias"}
    sep = train(tiny_config(tiny_bert, tiny_data, tmp_path / "sep", mode="separate", epochs=1,
                            steps_per_epoch=2))
    for task in ("sst", "quora", "sts"):
        assert [p.name for p in (sep / "models" / task / "model" / "tasks").iterdir()] == [task]
    trunks = {sha256_file(sep / "models" / t / "model" / "trunk" / "model.safetensors")
              for t in ("sst", "quora", "sts")}
    assert len(trunks) == 3      # three separately fine-tuned trunks
    assert cli.main(["evaluate", str(sep), "--data-dir", str(tiny_data), "--out",
                     str(tmp_path / "e.json")]) == 0
    result = json.loads((tmp_path / "e.json").read_text())
    assert set(result["models"]) == {"sst", "quora", "sts"} and "avg" in result


def test_frozen_trunk_stays_bit_identical(tmp_path, tiny_bert, tiny_data):
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "frozen", freeze_trunk=True,
                            epochs=1))
    assert sha256_file(run / "model" / "trunk" / "model.safetensors") == \
        sha256_file(tiny_bert / "model.safetensors")


def test_tune_adapters_after_trains_each_task_on_frozen_trunk(tmp_path, tiny_bert, tiny_data):
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "tuned", epochs=1,
                            tune_adapters_after=1))
    phases = [json.loads(x)["phase"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert phases == ["joint", "tune:sst", "tune:quora", "tune:sts"]
    joint_best = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    final = json.loads((run / "model" / "summary.json").read_text())
    assert final["avg"] >= joint_best["dev"]["avg"]


@pytest.mark.parametrize("surgery", ["pcgrad", "gradvac"])
def test_grad_surgery_runs(tmp_path, tiny_bert, tiny_data, surgery):
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / surgery, epochs=1, steps_per_epoch=2,
                            grad_surgery=surgery))
    line = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert torch.isfinite(torch.tensor(line["train_loss"]))


def test_existing_run_needs_resume_and_same_options(tmp_path, tiny_bert, tiny_data, tiny_pal_run):
    cfg = TrainConfig.from_dict(json.loads((tiny_pal_run / "config.json").read_text()))
    with pytest.raises(TrainingError, match="pass --resume"):
        train(cfg)
    with pytest.raises(TrainingError, match=r"different options \(\['lr'\]\)"):
        train(cfg.replace(lr=0.5, epochs=cfg.epochs), resume=True)
    assert train(cfg, resume=True) == tiny_pal_run      # finished: nothing to do


def test_train_command_killed_between_metrics_line_and_checkpoint_resumes_exactly(
        tmp_path, tiny_bert, tiny_data):
    """`palkit train` end to end: SIGKILLed (PALKIT_KILL_AT) after epoch 2's metrics line was
    made but before its checkpoint, then `--resume`d, it ends with the folder of a run never
    killed: bitwise weights, one metrics line per epoch, the same `model` link and summary.
    Every named kill point is covered in tests/test_kill_points.py."""
    common = ["--base-model", str(tiny_bert), "--data-dir", str(tiny_data), "--epochs", "2",
              "--steps-per-epoch", "6", "--save-every", "2", "--batch-size", "8", "--max-len",
              "32", "--pal-size", "8", "--pal-heads", "2", "--lr", "1e-3", "--device", "cpu"]
    straight = train_cli([*common, "--out", str(tmp_path / "straight" / "run")])
    victim = train_cli([*common, "--out", str(tmp_path / "victim" / "run")], kill_at="metrics:2")
    assert finish(victim) == -signal.SIGKILL
    assert_agrees_with_last(tmp_path / "victim" / "run")
    assert finish(train_cli([*common, "--out", str(tmp_path / "victim" / "run"), "--resume"])) == 0
    assert finish(straight) == 0
    a, b = (tensors_of(tmp_path / run / "run" / "last") for run in ("straight", "victim"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from uninterrupted"
    lines = (tmp_path / "victim" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2]   # no lost or repeated epochs
    assert run_tree(tmp_path / "victim" / "run") == run_tree(tmp_path / "straight" / "run")


def test_nan_loss_stops_with_message_and_keeps_last_checkpoint(tmp_path, tiny_bert, tiny_data,
                                                               monkeypatch):
    poison_loss_at_call(monkeypatch, 6)
    with pytest.raises(TrainingError, match=r"loss became nan .* epoch 2, step 2.*--resume"):
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "nan"))
    model, _, _ = load_model(tmp_path / "nan" / "last")     # epoch 1's checkpoint is intact
    assert set(model.tasks) == {"sst", "quora", "sts"}


def test_full_disk_while_saving_keeps_previous_checkpoint(tmp_path, tiny_bert, tiny_data,
                                                          monkeypatch):
    import palkit.trainer.checkpoint as ckpt
    real, calls = ckpt.save_file, {"n": 0}

    def disk_full(tensors, path, *args, **kwargs):
        calls["n"] += Path(path).name == "optimizer.safetensors"
        if calls["n"] == 2:     # the second checkpoint's optimizer file
            raise OSError(28, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with pytest.raises(OSError, match="No space left"):
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "full"))
    state = json.loads((tmp_path / "full" / "last" / "state.json").read_text())
    assert state["global_epoch"] == 1
    load_model(tmp_path / "full" / "last")
    assert not list((tmp_path / "full").glob(".*.tmp"))       # no half-written directory left


def test_config_file_and_flag_precedence(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('preset = "paper"\nmode = "shared"\nsteps-per-epoch = 7\n')
    cfg = build_config({"steps_per_epoch": 9, "lr": None}, str(toml))
    assert (cfg.mode, cfg.steps_per_epoch, cfg.lr, cfg.max_len) == ("shared", 9, 2e-5, 128)
    (tmp_path / "bad.json").write_text('{"learning_rate": 1}')
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['learning_rate'\]"):
        build_config({}, str(tmp_path / "bad.json"))


def test_train_help_documents_every_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")     # rich shortens option names to fit 80 columns
    assert cli.main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--mode", "--sampling", "--pal-size", "--pal-layers", "--pal-share-projections",
                 "--no-pal-share-projections", "--grad-surgery", "--tune-adapters-after",
                 "--freeze-trunk", "--base-model", "--tasks", "--epochs", "--steps-per-epoch",
                 "--batch-size", "--lr", "--max-len", "--seed", "--out", "--config", "--device",
                 "--precision", "--resume", "--data-dir", "--preset", "--sts-loss"):
        assert flag in text, flag


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["train", "--data-dir", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "PALKIT_DATA_DIR" in err and "\n" not in err
    assert cli.main(["evaluate", str(tmp_path), "--data-dir", str(tmp_path)]) == 2
    assert "neither a run directory" in capsys.readouterr().err


def test_ddp_two_processes_see_different_data_and_end_identical(tmp_path, tiny_bert, tiny_data):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = tmp_path / "ddp"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29517", str(REPO / "cli.py"), "train", "--base-model", str(tiny_bert),
         "--data-dir", str(tiny_data), "--epochs", "1", "--steps-per-epoch", "3", "--batch-size",
         "4", "--max-len", "32", "--pal-size", "8", "--pal-heads", "2", "--device", "cpu",
         "--out", str(out)], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world"] == 2
    assert ranks[0]["examples_seen"] != ranks[1]["examples_seen"]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]


def test_results_records_dev_and_test_with_command(tiny_pal_run, tiny_data, tmp_path):
    results = tmp_path / "accuracy.json"
    assert cli.main(["results", str(tiny_pal_run), "--name", "tiny-pals", "--as-out",
                     "runs/tiny", "--data-dir", str(tiny_data), "--results", str(results)]) == 0
    entries = json.loads(results.read_text())
    assert [e["split"] for e in entries] == ["dev", "test"]
    for e in entries:
        assert {"name", "mode", "sampling", "split", "sst_acc", "quora_acc", "quora_f1",
                "sts_pearson", "sts_spearman", "avg", "params_total", "params_task_specific",
                "wall_time_s", "command"} <= set(e)
        assert e["command"].startswith("palkit train ") and "--out runs/tiny" in e["command"]
        assert "--pal-size 8" in e["command"] and e["mode"] == "pals"
    table = results.with_suffix(".md").read_text()
    assert table.count("| tiny-pals |") == 2


def test_resume_without_a_run_is_refused_naming_the_runs_beside(tmp_path, tiny_bert, tiny_data):
    (tmp_path / "runs" / "real").mkdir(parents=True)
    (tmp_path / "runs" / "real" / "config.json").write_text("{}")
    cfg = tiny_config(tiny_bert, tiny_data, tmp_path / "runs" / "typo")
    with pytest.raises(TrainingError) as e:
        train(cfg, resume=True)
    msg = str(e.value)
    assert "\n" not in msg and "typo: no run to resume" in msg and "real" in msg
    assert not (tmp_path / "runs" / "typo").exists()


@pytest.mark.parametrize("case", ["no-weights", "missing"])
def test_base_model_that_is_not_a_bert_folder_is_one_line(tmp_path, tiny_bert, tiny_data, case):
    from palkit.trainer.checkpoint import CheckpointError
    if case == "no-weights":
        base = tmp_path / "half"
        base.mkdir()
        (base / "config.json").write_text((tiny_bert / "config.json").read_text())
        expected = "has config.json but no BERT weights"
    else:
        base = tmp_path / "runs" / "nothing" / "here"
        expected = "no such folder"
    with pytest.raises(CheckpointError) as e:
        train(tiny_config(base, tiny_data, tmp_path / "out"))
    assert "\n" not in str(e.value) and str(base) in str(e.value) and expected in str(e.value)
    assert "Repo id" not in str(e.value)
