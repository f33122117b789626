"""Shipping a new task later against a run's frozen trunk."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from palkit import cli
from palkit.core.errors import DataError
from palkit.trainer.checkpoint import CheckpointError, load_model, sha256_file


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
    from palkit.trainer.add_task import add_task, task_from_options
    spec = task_from_options("pairs", None, {
        "kind": "pair_classification", "text_columns": ["sentence1", "sentence2"],
        "label_column": "is_duplicate", "labels": ["no", "yes"],
        "train_file": "sst/ids-sst-train.csv", "dev_file": "sst/ids-sst-dev.csv"})
    with pytest.raises(DataError, match=r"ids-sst-train.csv:1: missing column"):
        add_task(run_copy, spec, str(tiny_data))
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
    from palkit.trainer.results import canonical_command
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
    from palkit.trainer.add_task import adapter_options
    chosen = adapter_options({"mode": run_mode, "pal_layers": "top"}, adapter, layers)
    assert (chosen["mode"], chosen["pal_layers"]) == expected


@pytest.mark.parametrize("run_mode, adapter, message", [
    ("shared", None, "add --adapter pal"),
    ("pals", "head", "--adapter head has none"),
])
def test_pal_layers_without_pals_is_refused(run_mode, adapter, message):
    from palkit.core.errors import ConfigError
    from palkit.trainer.add_task import adapter_options
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


# ---- a run whose tasks differ: head-only and PAL tasks added later -----------------------------

QUIET = {"log": lambda *a: None}


def test_hybrid_run_loads_and_evaluates(hybrid_run: Path, tiny_data: Path, capsys):
    model, _, _ = load_model(hybrid_run / "model")
    assert model.pal.layers == (0, 1) and model.task_pal("sst").layers == (0, 1)
    assert model.task_pal("cfimdb") is None and model.task_pal("para").layers == (1,)
    assert model.placement_groups(list(model.tasks)) == [["cfimdb", "dup"], ["para"],
                                                         ["quora", "sst", "sts"]]
    assert cli.main(["evaluate", str(hybrid_run), "--data-dir", str(tiny_data)]) == 0
    out = capsys.readouterr().out
    assert "cfimdb" in out and "para" in out and "sst" in out


def test_adding_tasks_leaves_the_launch_tasks_bit_identical(hybrid_run: Path, tiny_pal_run: Path):
    import torch
    before, _, _ = load_model(tiny_pal_run / "model")
    after, _, _ = load_model(hybrid_run / "model")
    torch.manual_seed(0)
    ids = torch.randint(5, 30, (2, 12))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        for t in ("sst", "quora", "sts"):
            assert torch.equal(after(ids, mask, types, task=t), before(ids, mask, types, task=t))


def test_pal_of_another_width_is_refused_on_load(hybrid_run: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(hybrid_run, run, symlinks=True)
    cfg_file = run / "model" / "tasks" / "para" / "adapter_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["pal"]["size"] = 12
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="PAL width 12 with 2 heads differs"):
        load_model(run / "model")


def hybrid_reference(model, task: str, ids, mask, types):
    import torch

    from palkit.export.programs import reference_outputs
    return reference_outputs(model, task, *(torch.from_numpy(x) for x in (ids, mask, types)))[0]


@pytest.mark.slow
def test_hybrid_executorch_bundle_matches_pytorch(hybrid_run: Path, hybrid_bundle: Path,
                                                  tiny_data: Path, tmp_path: Path):
    import numpy as np

    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.engine import Engine

    out, tasks = hybrid_bundle, ["sst", "quora", "cfimdb", "dup", "para"]
    m = json.loads((out / "manifest.json").read_text())
    et = m["runtimes"]["executorch"]
    # one method per placement; the tasks (and the all-tasks rows) grouped by placement
    assert m["trunk"]["pal"]["layers"] == [0, 1] and et["method"] == "forward"
    assert set(et["methods"]) == {"forward_head", "forward_pal_1"}
    assert et["methods"]["forward_head"]["adapter"] == {"kind": "head", "layers": []}
    assert et["methods"]["forward_head"]["task_inputs"] == [
        "head.out.weight_t", "head.out.bias", "output.linear", "output.sigmoid", "output.offset"]
    assert [t["name"] for t in m["tasks"]] == ["sst", "quora", "cfimdb", "dup", "para"]
    assert {t["name"]: t["adapter"] for t in m["tasks"]}["para"] == {"kind": "pal", "layers": [1]}
    assert et["all_tasks"]["tasks"] == ["sst", "quora", "cfimdb", "dup", "para"]
    model, _, _ = load_model(hybrid_run / "model")
    engine = Engine(load_bundle(out), "executorch")
    ids, mask, types = engine.tokenizer("the movie was good", "a fine film")
    for task in tasks:
        got, _, _ = engine.run_ids(task, ids, mask, types)
        np.testing.assert_allclose(got, hybrid_reference(model, task, ids, mask, types),
                                   atol=1e-4)
    outs, _ = engine.run_all_ids(ids, mask, types)
    for task in tasks:
        np.testing.assert_allclose(outs[task], hybrid_reference(model, task, ids, mask, types),
                                   atol=1e-4)
    verify = json.loads((out / "verify.json").read_text())
    assert verify["passed"]
    # the same run exported again: the same bytes
    again = tmp_path / "again"
    export_run(hybrid_run, again,
               ExportOptions(target="executorch", quant="fp32", tasks=tasks, data_dir=tiny_data),
               **QUIET)
    assert (again / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()


@pytest.mark.slow
def test_a_later_task_of_a_known_placement_needs_no_lowering(hybrid_run: Path, tiny_data: Path,
                                                             tmp_path: Path, monkeypatch):
    import numpy as np

    from palkit.export import executorch_export
    from palkit.export.bundle import ExportError, add_adapter, export_run
    from palkit.export.options import ExportOptions
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.engine import Engine

    out = tmp_path / "bundle"
    export_run(hybrid_run, out,
               ExportOptions(target="android", quant="fp32", onnx=False, tasks=["sst", "cfimdb"],
                             data_dir=tiny_data),
               **QUIET)
    program = sha256_file(out / "executorch" / "trunk.pte")

    def no_lowering(*args, **kwargs):
        raise AssertionError("lowered a program to add a task")

    monkeypatch.setattr(executorch_export, "lower_methods", no_lowering)
    add_adapter(hybrid_run, "dup", out, data_dir=tiny_data, **QUIET)
    assert sha256_file(out / "executorch" / "trunk.pte") == program
    b = load_bundle(out)
    assert b.manifest.adapter("dup") == {"kind": "head", "layers": []}
    assert b.manifest.executorch_method("dup")[0] == "forward_head"
    model, _, _ = load_model(hybrid_run / "model")
    engine = Engine(b, "executorch")
    ids, mask, types = engine.tokenizer("a man is running", "a man runs")
    got, _, _ = engine.run_ids("dup", ids, mask, types)
    np.testing.assert_allclose(got, hybrid_reference(model, "dup", ids, mask, types), atol=1e-4)
    # a placement the program has no method for is one lowering: refused, nothing changes
    manifest = (out / "manifest.json").read_bytes()
    with pytest.raises(ExportError, match=r"PALs in layers \[1\].*lowers one more method"):
        add_adapter(hybrid_run, "para", out, data_dir=tiny_data, **QUIET)
    assert (out / "manifest.json").read_bytes() == manifest


def test_add_task_skips_a_malformed_row_as_training_does(run_copy: Path, tiny_data: Path,
                                                         tmp_path: Path, capsys):
    """Quora's own train file has empty texts: add-task checks the data with --bad-rows' default
    (skip, each reported) like train, instead of refusing what training would have read."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    train = data / "cfimdb" / "ids-cfimdb-train.csv"
    lines = train.read_text().splitlines()
    body = (lines[1:] * 5)[:199]
    bad = "199\tid00199\t\t1"
    train.write_text("\n".join([lines[0], *body, bad]) + "\n")
    assert cli.main(["add-task", str(run_copy), "--task", "cfimdb", "--data-dir", str(data),
                     "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "8"]) == 0
    assert "ids-cfimdb-train.csv:201" in capsys.readouterr().err
    assert (run_copy / "model" / "tasks" / "cfimdb" / "adapter.safetensors").is_file()


def test_typed_options_reach_the_new_tasks_config(run_copy: Path, tiny_data: Path):
    """A later task's placement and training options travel as AddTaskOptions into its run's
    config; what is left None comes from the run (shape, seed) or add-task's defaults (lr)."""
    from palkit.trainer.add_task import ADD_TASK_DEFAULTS, AddTaskOptions, task_run_config
    from palkit.trainer.checkpoint import read_run_config
    from palkit.trainer.tasks import BUILTIN_TASKS

    run_cfg = read_run_config(run_copy)
    options = AddTaskOptions(adapter="pal", pal_layers="top-1", epochs=2, batch_size=4)
    cfg = task_run_config(run_copy, BUILTIN_TASKS["sst"], str(tiny_data), options)
    assert (cfg.mode, cfg.pal_layers, cfg.epochs, cfg.batch_size) == ("pals", "top-1", 2, 4)
    assert cfg.lr == ADD_TASK_DEFAULTS["lr"] and cfg.seed == run_cfg["seed"]
    assert cfg.freeze_trunk and cfg.out == str(run_copy / "added" / "sst")
    assert options.training() == {"epochs": 2, "batch_size": 4}
    head = task_run_config(run_copy, BUILTIN_TASKS["sst"], None, AddTaskOptions(adapter="head"))
    assert head.mode == "shared"
