"""Shipping a new task later against a run's frozen trunk."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

import cli
from trainer.checkpoint import CheckpointError, load_model, sha256_file
from trainer.data import DataError


@pytest.fixture()
def run_copy(tiny_pal_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(tiny_pal_run, dst, symlinks=True)
    return dst


def test_add_builtin_task_keeps_trunk_bit_identical(run_copy: Path, tiny_data: Path):
    trunk = run_copy / "model" / "trunk" / "model.safetensors"
    before = sha256_file(trunk)
    olds = {t: sha256_file(run_copy / "model" / "tasks" / t / "adapter.safetensors")
            for t in ("sst", "quora", "sts")}
    assert cli.main(["add-task", str(run_copy), "--task", "cfimdb", "--data-dir", str(tiny_data),
                     "--epochs", "1", "--steps-per-epoch", "3", "--batch-size", "8"]) == 0
    assert sha256_file(trunk) == before
    cfg = json.loads((run_copy / "model" / "tasks" / "cfimdb" / "adapter_config.json").read_text())
    assert cfg["trunk_sha256"] == before and cfg["task"]["labels"] == ["negative", "positive"]
    assert cfg["pal"]["size"] == 8
    assert {t: sha256_file(run_copy / "model" / "tasks" / t / "adapter.safetensors")
            for t in olds} == olds
    model, _, _ = load_model(run_copy / "model")
    assert set(model.tasks) == {"sst", "quora", "sts", "cfimdb"}
    keys = load_file(run_copy / "model" / "tasks" / "cfimdb" / "adapter.safetensors").keys()
    assert any(k.startswith("pal.") for k in keys)


def test_add_described_pair_task(run_copy: Path, tiny_data: Path):
    assert cli.main(["add-task", str(run_copy), "--task", "dup", "--data-dir", str(tiny_data),
                     "--kind", "pair_classification", "--text-columns", "sentence1,sentence2",
                     "--label-column", "is_duplicate", "--labels", "no,yes",
                     "--train-file", "quora/quora-train.csv", "--dev-file", "quora/quora-dev.csv",
                     "--epochs", "1", "--steps-per-epoch", "2"]) == 0
    assert (run_copy / "model" / "tasks" / "dup" / "adapter.safetensors").is_file()


def test_existing_task_name_is_refused_and_nothing_changes(run_copy: Path, tiny_data: Path,
                                                            capsys):
    before = sha256_file(run_copy / "model" / "tasks" / "sst" / "adapter.safetensors")
    assert cli.main(["add-task", str(run_copy), "--task", "sst", "--data-dir", str(tiny_data)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert sha256_file(run_copy / "model" / "tasks" / "sst" / "adapter.safetensors") == before


def test_data_file_of_the_wrong_kind_is_refused(run_copy: Path, tiny_data: Path):
    from trainer.add_task import add_task, task_from_options
    spec = task_from_options("pairs", None, {
        "kind": "pair_classification", "text_columns": ["sentence1", "sentence2"],
        "label_column": "is_duplicate", "labels": ["no", "yes"],
        "train_file": "sst/ids-sst-train.csv", "dev_file": "sst/ids-sst-dev.csv"})
    with pytest.raises(DataError, match=r"ids-sst-train.csv:1: missing column"):
        add_task(run_copy, spec, str(tiny_data), {})
    assert not (run_copy / "model" / "tasks" / "pairs").exists()
    assert not (run_copy / "added").exists()


def test_adapter_from_another_trunk_is_refused(run_copy: Path):
    cfg_path = run_copy / "model" / "tasks" / "sst" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["trunk_sha256"] = "0" * 64
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="trained against trunk 000000000000"):
        load_model(run_copy / "model")


def test_results_quote_the_add_task_command(run_copy: Path, tiny_data: Path):
    from trainer.results import canonical_command
    assert cli.main(["add-task", str(run_copy), "--task", "cfimdb", "--data-dir", str(tiny_data),
                     "--epochs", "1", "--steps-per-epoch", "2"]) == 0
    cfg = json.loads((run_copy / "added" / "cfimdb" / "config.json").read_text())
    assert canonical_command(cfg, "runs/x/added/cfimdb") == \
        f"palkit add-task runs/x --task cfimdb --adapter pal --pal-layers {cfg['pal_layers']} " \
        "--epochs 1 --steps-per-epoch 2"


@pytest.mark.parametrize("run_mode, adapter, layers, expected", [
    ("pals", None, None, ("pals", "top")),
    ("pals", "head", None, ("shared", "top")),
    ("pals", "pal", "top-1", ("pals", "top-1")),
    ("shared", None, None, ("shared", "top")),
    ("shared", "pal", None, ("pals", "all")),
    ("shared", "pal", "4,5", ("pals", "4,5")),
])
def test_a_later_task_chooses_its_own_adapter(run_mode, adapter, layers, expected):
    from trainer.add_task import adapter_options
    chosen = adapter_options({"mode": run_mode, "pal_layers": "top"}, adapter, layers)
    assert (chosen["mode"], chosen["pal_layers"]) == expected


@pytest.mark.parametrize("run_mode, adapter, message", [
    ("shared", None, "add --adapter pal"),
    ("pals", "head", "--adapter head has none"),
])
def test_pal_layers_without_pals_is_refused(run_mode, adapter, message):
    from trainer.add_task import adapter_options
    from trainer.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        adapter_options({"mode": run_mode, "pal_layers": "all"}, adapter, "top-1")


def test_head_only_task_added_to_a_pal_run(run_copy: Path, tiny_data: Path):
    trunk = run_copy / "model" / "trunk" / "model.safetensors"
    before = sha256_file(trunk)
    assert cli.main(["add-task", str(run_copy), "--task", "cfimdb", "--data-dir", str(tiny_data),
                     "--adapter", "head", "--epochs", "1", "--steps-per-epoch", "2",
                     "--batch-size", "8"]) == 0
    task = run_copy / "model" / "tasks" / "cfimdb"
    assert sha256_file(trunk) == before
    assert json.loads((task / "adapter_config.json").read_text())["pal"] is None
    assert {k.split(".")[0] for k in load_file(task / "adapter.safetensors")} == {"head"}
    assert json.loads((run_copy / "added" / "cfimdb" / "config.json").read_text())["mode"] == "shared"
