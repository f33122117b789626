"""Bundles from the tiny PAL run: parity, int8 agreement, swapping, manifest, trunk stored once,
byte-identical re-export, adding an adapter, and every refusal as a one-line error.

ExecuTorch lowering takes tens of seconds per task even for the tiny model, so the ExecuTorch
bundles are built once per session (module fixtures) and hold as few tasks as the checks need.
"""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palkit.export.bundle import ExportError, add_adapter, export_run
from palkit.export.options import ExportOptions
from palkit.export.programs import reference_outputs
from palkit.runtime.bundle import load_bundle
from palkit.runtime.contract import manifest_keys
from palkit.runtime.engine import Engine
from palkit.runtime.inputs import Texts
from palkit.runtime.manifest import VERSION, BundleError, read_manifest
from palkit.runtime.runners import executorch_lib
from palkit.trainer.checkpoint import load_model, resolve_model_dir, sha256_file
from testing_utils import REPO

QUIET = dict(log=lambda *a: None)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def android_int8(tiny_pal_run, tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "android-int8"
    export_run(tiny_pal_run, out,
               ExportOptions(target="android", quant="int8", tasks=["quora"], data_dir=tiny_data),
               **QUIET)
    return out


def encode(engine, *texts):
    return engine.tokenizer(*texts)


# ---- parity and swapping ---------------------------------------------------------------------

def check_parity(bundle_dir: Path, run: Path, runtime: str, tol: float) -> None:
    model, _, _ = load_model(resolve_model_dir(run))
    engine = Engine(load_bundle(bundle_dir), runtime)
    for task in engine.bundle.tasks:
        texts = ("the movie was good", "a man is running") if engine.bundle.tasks[task].is_pair \
            else ("the movie was good",)
        ids, mask, types = engine.tokenizer(*texts)
        got, _, _ = engine.run_ids(task, ids, mask, types)
        ref = reference_outputs(model, task, *(torch.from_numpy(x) for x in (ids, mask, types)))
        assert np.abs(got - ref[0].numpy()).max() < tol, (runtime, task, got, ref)


def test_onnx_fp32_parity_and_swapping(onnx_fp32, tiny_pal_run):
    check_parity(onnx_fp32, tiny_pal_run, "onnxruntime", 1e-4)


@pytest.mark.slow
def test_executorch_fp32_parity(et_fp32, tiny_pal_run):
    check_parity(et_fp32, tiny_pal_run, "executorch", 1e-4)
    check_parity(et_fp32, tiny_pal_run, "onnxruntime", 1e-4)
    verify = json.loads((et_fp32 / "verify.json").read_text())
    assert verify["passed"]
    for rt in ("executorch", "onnxruntime"):
        for r in verify["runtimes"][rt]["tasks"].values():
            assert r["max_abs_diff"] < 1e-4


@pytest.mark.slow
def test_all_tasks_method_matches_each_task(et_fp32, tiny_pal_run, tiny_data, tmp_path):
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    m = json.loads((et_fp32 / "manifest.json").read_text())
    et = m["runtimes"]["executorch"]
    assert et["all_tasks"] == {"program": "executorch/all_tasks.pte", "method": "forward_all",
                               "tasks": ["sst", "sts"]}
    assert sorted(p.name for p in (et_fp32 / "executorch").iterdir()) == [
        "all_tasks.pte", "sst.safetensors", "sts.safetensors", "trunk.ptd", "trunk.pte"]
    # forward_all in a program of its own, so loading trunk.pte plans no memory for it
    lib = executorch_lib()
    methods = {}
    for name in ("trunk", "all_tasks"):
        program = lib._load_program(str(et_fp32 / "executorch" / f"{name}.pte"),
                                    data_path=str(et_fp32 / "executorch" / "trunk.ptd"))
        methods[name] = [program.get_method_name(i) for i in range(program.num_methods())]
    assert methods == {"trunk": ["forward"], "all_tasks": ["forward_all"]}
    assert m["runtimes"]["onnxruntime"]["all_tasks"] == {"model": "onnx/all_tasks.onnx",
                                                         "tasks": ["sst", "sts"]}
    engine = Engine(load_bundle(et_fp32), "executorch")
    ids, mask, types = engine.tokenizer("the movie was good", "a man is running")
    outs, _ = engine.run_all_ids(ids, mask, types)
    tensors = [torch.from_numpy(x) for x in (ids, mask, types)]
    for task in ("sst", "sts"):
        np.testing.assert_allclose(outs[task], reference_outputs(model, task, *tensors)[0].numpy(),
                                   atol=1e-4)
    # ONNX Runtime's all-tasks graph: the same outputs in one call
    ort_outs, _ = Engine(load_bundle(et_fp32), "onnxruntime").run_all_ids(ids, mask, types)
    for task in ("sst", "sts"):
        np.testing.assert_allclose(ort_outs[task], outs[task], atol=1e-4)
    verify = json.loads((et_fp32 / "verify.json").read_text())
    for rt in ("executorch", "onnxruntime"):
        checked = verify["runtimes"][rt]["all_tasks_program"]["tasks"]
        assert set(checked) == {"sst", "sts"}
        assert all(r["max_abs_diff"] < 1e-4 for r in checked.values())
    # Mixed single/pair tasks read different inputs: predict_all runs those that read it.
    assert [p.task for p in engine.predict_all(Texts("good", "fine"))] == ["sts"]
    assert [p.task for p in engine.predict_all(Texts("good"))] == ["sst"]
    # Replacing a task keeps the all-tasks method: it takes the new weights file as its input.
    bundle = tmp_path / "replaced"
    shutil.copytree(et_fp32, bundle)
    add_adapter(tiny_pal_run, "sst", bundle, replace=True, data_dir=tiny_data, **QUIET)
    b = load_bundle(bundle)
    for rt in ("executorch", "onnxruntime"):
        assert b.manifest.all_tasks(rt).tasks == ["sst", "sts"]
        outs, _ = Engine(b, rt).run_all_ids(ids, mask, types)
        np.testing.assert_allclose(outs["sst"],
                                   reference_outputs(model, "sst", *tensors)[0].numpy(), atol=1e-4)


@pytest.mark.slow
def test_executorch_swapping_binds_each_tasks_weights(et_fp32, tiny_pal_run):
    """One program, two weights files: every swap gives the task its own outputs (fp32 bundle:
    PyTorch's within 1e-4), and the swap itself is choosing tensors already read."""
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    engine = Engine(load_bundle(et_fp32), "executorch")
    ids, mask, types = engine.tokenizer("how can i learn to cook", "why do dogs play")
    tensors = [torch.from_numpy(x) for x in (ids, mask, types)]
    outs = {}
    for task in ["sst", "sts", "sst", "sts", "sst"]:
        got, _, _ = engine.run_ids(task, ids, mask, types)
        assert got.shape == (model.tasks[task].num_outputs,)
        np.testing.assert_allclose(got, reference_outputs(model, task, *tensors)[0].numpy(),
                                   atol=1e-4)
        assert outs.setdefault(task, got.tobytes()) == got.tobytes()  # the same bits each time
    assert engine.impl.program is not None and len(engine.impl.weights) == 2


def test_swapping_gives_each_task_its_own_result(onnx_fp32, tiny_pal_run):
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    ids, mask, types = engine.tokenizer("how can i learn to cook", "why do dogs play")
    tensors = [torch.from_numpy(x) for x in (ids, mask, types)]
    for task in ["quora", "sts", "quora", "sts"]:
        got, _, _ = engine.run_ids(task, ids, mask, types)
        assert got.shape == (model.tasks[task].num_outputs,)
        np.testing.assert_allclose(got, reference_outputs(model, task, *tensors)[0].numpy(),
                                   atol=1e-4)


@pytest.mark.slow
def test_int8_bundle_reports_agreement(android_int8):
    verify = json.loads((android_int8 / "verify.json").read_text())
    for rt in ("executorch", "onnxruntime"):
        r = verify["runtimes"][rt]["tasks"]["quora"]
        assert 0.0 <= r["agreement"] <= 1.0 and "metric_deltas" in r
    m = json.loads((android_int8 / "manifest.json").read_text())
    assert m["quantization"]["scheme"] == "int8"
    engine = Engine(load_bundle(android_int8), "executorch")
    p = engine.predict("quora", "how can i learn to cook", "how can i learn to cook")
    assert p.label in ("not paraphrase", "paraphrase") and len(p.probabilities) == 2


# ---- manifest, layout, determinism -----------------------------------------------------------

def test_manifest_contents(onnx_fp32, tiny_pal_run):
    m = json.loads((onnx_fp32 / "manifest.json").read_text())
    trunk_sha = sha256_file(resolve_model_dir(tiny_pal_run) / "trunk" / "model.safetensors")
    assert (m["format"], m["version"]) == ("palkit-bundle", VERSION)
    assert m["trunk"]["sha256"] == trunk_sha
    assert m["tokenizer"]["vocab_file"] == "vocab.txt" and m["tokenizer"]["lowercase"] is True
    assert m["runtimes"]["onnxruntime"]["trunk_model"] == "onnx/trunk.onnx"
    by_name = {t["name"]: t for t in m["tasks"]}
    assert set(by_name) == {"sst", "quora", "sts"}
    assert by_name["sst"]["num_outputs"] == 5 and len(by_name["sst"]["labels"]) == 5
    assert by_name["sts"]["score_range"] == [0.0, 5.0] and by_name["sts"]["metric"] == "pearson"
    assert all(t["trunk_sha256"] == trunk_sha for t in m["tasks"])
    for rel, f in m["files"].items():
        assert (onnx_fp32 / rel).stat().st_size == f["bytes"]


def test_trunk_stored_once_and_adapters_small(onnx_fp32, tiny_pal_run):
    files = sorted(p.name for p in (onnx_fp32 / "onnx").iterdir())
    assert files == ["all_tasks.onnx", "quora.onnx_adapter", "sst.onnx_adapter",
                     "sts.onnx_adapter", "trunk.onnx", "trunk.onnx.data"]
    size = {f: (onnx_fp32 / "onnx" / f).stat().st_size for f in files}
    # both graphs read the one weights file, which holds the trunk once
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    trunk_bytes = 4 * sum(p.numel() for p in model.trunk.parameters())
    assert 0.9 * trunk_bytes < size["trunk.onnx.data"] < 1.1 * trunk_bytes
    for f in files:
        if f.endswith(".onnx_adapter"):
            # The tiny model's PAL is relatively large; MiniLM's is ~1-2 % of its trunk.
            assert size[f] < 0.1 * size["trunk.onnx.data"], f
    # the graphs hold nodes and tensors under 1 KiB (the tiny model's are nearly all that)
    assert size["trunk.onnx"] + size["all_tasks.onnx"] < size["trunk.onnx.data"]


def test_reexport_is_byte_identical(onnx_fp32, tiny_pal_run, tiny_data, tmp_path):
    again = tmp_path / "again"
    export_run(tiny_pal_run, again,
               ExportOptions(target="onnx", quant="fp32", data_dir=tiny_data), **QUIET)
    assert files_of(again) == files_of(onnx_fp32)


@pytest.mark.slow
def test_executorch_fp32_reexport_is_byte_identical(et_fp32, tiny_pal_run, tiny_data, tmp_path):
    # the programs, their trunk data and every task's weights file, bit for bit
    again = tmp_path / "again"
    export_run(tiny_pal_run, again,
               ExportOptions(target="android", quant="fp32", tasks=["sst", "sts"],
                             data_dir=tiny_data),
               **QUIET)
    assert files_of(again) == files_of(et_fp32)


@pytest.mark.slow
def test_executorch_add_task_writes_weights_without_lowering(android_int8, tiny_pal_run,
                                                             tiny_data, tmp_path, monkeypatch):
    import palkit.export.executorch_export as et_export

    def no_lowering(*args, **kwargs):
        raise AssertionError("add-task must not lower a program")

    monkeypatch.setattr(et_export, "lower_methods", no_lowering)
    bundle = tmp_path / "grow"
    shutil.copytree(android_int8, bundle)
    trunk_files = ("executorch/trunk.pte", "executorch/trunk.ptd", "onnx/trunk.onnx")
    trunk_before = {rel: (bundle / rel).read_bytes() for rel in trunk_files}
    inodes = {rel: (bundle / rel).stat().st_ino for rel in trunk_files}
    add_adapter(tiny_pal_run, "sst", bundle, data_dir=tiny_data, **QUIET)
    for rel, data in trunk_before.items():
        assert (bundle / rel).read_bytes() == data
        assert (bundle / rel).stat().st_ino == inodes[rel]  # not even rewritten
    b = load_bundle(bundle)
    assert set(b.tasks) == {"quora", "sst"}
    assert b.manifest.task("sst").files["executorch"] == "executorch/sst.safetensors"
    assert sorted(p.name for p in (bundle / "executorch").iterdir()) == [
        "quora.safetensors", "sst.safetensors", "trunk.ptd", "trunk.pte"]
    verify = json.loads((bundle / "verify.json").read_text())
    assert set(verify["runtimes"]["executorch"]["tasks"]) == {"quora", "sst"}
    assert Engine(b, "executorch").predict("sst", "the film was good").label
    with pytest.raises(ExportError, match="already has task 'sst'"):
        add_adapter(tiny_pal_run, "sst", bundle, data_dir=tiny_data, **QUIET)


def test_adapter_from_another_trunk_is_refused(onnx_fp32, tiny_bert, tiny_data, tmp_path):
    from testing_utils import make_tiny_bert, tiny_config

    from palkit.trainer.train import train
    other = train(tiny_config(make_tiny_bert(tmp_path / "bert2", seed=1), tiny_data,
                              tmp_path / "other", epochs=1, steps_per_epoch=1))
    bundle = tmp_path / "b"
    shutil.copytree(onnx_fp32, bundle)
    with pytest.raises(ExportError, match="not this bundle's trunk"):
        add_adapter(other, "sst", bundle, replace=True, data_dir=tiny_data, **QUIET)


# ---- refusals --------------------------------------------------------------------------------

def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


@pytest.fixture
def copy_of(onnx_fp32, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(onnx_fp32, dst)
    return dst


def edit_manifest(folder: Path, fn) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    fn(m)
    (folder / "manifest.json").write_text(json.dumps(m))


def test_refuses_corrupt_file(copy_of):
    p = copy_of / "onnx" / "sst.onnx_adapter"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "sst.onnx_adapter" in one_line(e) and "SHA-256" in str(e.value)


def test_refuses_truncated_file(copy_of):
    p = copy_of / "onnx" / "trunk.onnx"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "trunk.onnx" in one_line(e) and "bytes" in str(e.value)


def test_refuses_missing_file(copy_of):
    (copy_of / "onnx" / "sts.onnx_adapter").unlink()
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "sts.onnx_adapter" in one_line(e) and "missing" in str(e.value)


def test_refuses_swapped_adapter(copy_of):
    shutil.copy(copy_of / "onnx" / "sst.onnx_adapter", copy_of / "onnx" / "sts.onnx_adapter")
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "sts.onnx_adapter" in one_line(e)


def test_refuses_unknown_version(copy_of):
    edit_manifest(copy_of, lambda m: m.update(version=99))
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "version 99" in one_line(e)


def test_refuses_a_format_1_bundle_saying_what_to_do(copy_of):
    # format 1 had a program per ExecuTorch task; this palkit reads format 2 only
    edit_manifest(copy_of, lambda m: m.update(version=1))
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "format version 1 is not supported" in one_line(e)
    assert f"reads version {VERSION}" in one_line(e) and "palkit export" in one_line(e)


def test_refuses_escaping_path(copy_of):
    def escape(m):
        m["tasks"][0]["files"]["onnxruntime"] = "../outside.onnx_adapter"
    edit_manifest(copy_of, escape)
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "escapes" in one_line(e)


def test_refuses_task_from_another_trunk(copy_of):
    edit_manifest(copy_of, lambda m: m["tasks"][1].update(trunk_sha256="0" * 64))
    with pytest.raises(BundleError) as e:
        load_bundle(copy_of)
    assert "built against trunk" in one_line(e)


def test_export_refuses_an_existing_folder_without_overwrite(onnx_fp32, tiny_pal_run, tmp_path):
    with pytest.raises(ExportError) as e:
        export_run(tiny_pal_run, onnx_fp32, ExportOptions(target="onnx", quant="fp32"), **QUIET)
    assert one_line(e) == f"{onnx_fp32} exists; pass --overwrite to replace it"
    (tmp_path / "notes").mkdir()
    with pytest.raises(ExportError, match="exists and is not a bundle"):
        export_run(tiny_pal_run, tmp_path / "notes", ExportOptions(target="onnx", overwrite=True),
                   **QUIET)


def test_export_of_an_unknown_task_lists_the_runs_tasks(tiny_pal_run, tmp_path):
    from palkit.core.errors import PalkitError
    with pytest.raises(PalkitError) as e:
        export_run(tiny_pal_run, tmp_path / "b", ExportOptions(target="onnx", tasks=["nope"]),
                   **QUIET)
    assert "no task 'nope' (it has: quora, sst, sts)" in one_line(e)
    assert not (tmp_path / "b").exists()


def test_loading_checks_only_the_files_a_command_uses(copy_of):
    damaged = copy_of / "onnx" / "sst.onnx_adapter"
    damaged.write_bytes(damaged.read_bytes()[::-1])
    engine = Engine(load_bundle(copy_of, runtime="onnxruntime", tasks=["quora"]), "onnxruntime")
    assert engine.predict("quora", "how can i cook", "how can i run").label
    with pytest.raises(BundleError) as e:      # the damaged file, checked when first used
        engine.predict("sst", "a good film")
    assert "sst.onnx_adapter" in one_line(e) and "SHA-256" in str(e.value)
    with pytest.raises(BundleError, match="sst.onnx_adapter"):
        load_bundle(copy_of, runtime="onnxruntime")


@pytest.mark.slow
def test_damaged_executorch_task_file_does_not_block_onnx_or_other_tasks(et_fp32, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(et_fp32, bundle)
    weights = bundle / "executorch" / "sst.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10] + bytes(10))
    onnx = Engine(load_bundle(bundle, runtime="onnxruntime"), "onnxruntime")
    assert onnx.predict("sst", "a good film").label
    et = Engine(load_bundle(bundle, runtime="executorch", tasks=["sts"]), "executorch")
    assert et.predict("sts", "a man is running", "a man runs").score is not None
    with pytest.raises(BundleError) as e:
        et.predict("sst", "a good film")
    assert "sst.safetensors" in one_line(e) and "SHA-256" in one_line(e)


def test_unknown_task_empty_text_and_pairs(onnx_fp32):
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    with pytest.raises(BundleError) as e:
        engine.predict("nope", "text")
    assert "no task 'nope'" in one_line(e)
    with pytest.raises(BundleError) as e:
        engine.predict("sst", "   ")
    assert "empty" in one_line(e)
    singles = [t for t, info in engine.bundle.tasks.items() if not info.is_pair]
    assert [p.task for p in engine.predict_all(Texts("only one text"))] == singles
    pairs = engine.predict_all(Texts("the movie was good", "the film was good"))
    assert [p.task for p in pairs] == [t for t in engine.bundle.tasks if t not in singles]


def test_too_long_text_is_truncated_with_warning(onnx_fp32, capsys):
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    p = engine.predict("sst", "the movie was good " * 200)
    assert p.tokens == engine.tokenizer.max_length
    assert "truncated" in capsys.readouterr().err


def test_concurrent_predictions(onnx_fp32):
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    expected = {t: engine.predict(t, "how can i learn to cook", "how can i learn to run").outputs
                for t in ("quora", "sts")}
    errors, results = [], []

    def work(i):
        try:
            t = ("quora", "sts")[i % 2]
            results.append((t, engine.predict(t, "how can i learn to cook",
                                              "how can i learn to run").outputs))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(results) == 64
    for t, out in results:
        np.testing.assert_allclose(out, expected[t], atol=1e-6)


def test_cli_predict_and_demo(onnx_fp32, capsys, monkeypatch):
    import io

    from palkit import cli
    assert cli.main(["predict", str(onnx_fp32), "--task", "sst", "a good film",
                     "--runtime", "onnxruntime"]) == 0
    assert "sst" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("a good film\nhow can i cook ||| how can i run\n"
                                                 ":task sts\nnot a pair\n:quit\n"))
    assert cli.main(["demo", str(onnx_fp32)]) == 0
    out = capsys.readouterr().out
    assert "first swap" in out and "score" in out and "skipped" in out


def test_evaluate_bundle(onnx_fp32, tiny_data, tiny_pal_run):
    from palkit.export.evaluate import evaluate_bundle
    from palkit.trainer.evaluate import evaluate_model_dir
    got = evaluate_bundle(onnx_fp32, tiny_data, "dev", max_examples=16)
    ref = evaluate_model_dir(resolve_model_dir(tiny_pal_run), tiny_data, "dev", 128,
                             max_examples=16)
    for key in ("sst_acc", "quora_acc", "quora_f1", "sts_pearson", "sts_spearman", "avg"):
        assert abs(got[key] - ref[key]) < 1e-3, key
    assert got["tasks"] == ["sst", "quora", "sts"] or set(got["tasks"]) == {"sst", "quora", "sts"}


def manifest_values(manifest: dict, key: str) -> list:
    """Every value at a manifest_keys.json path ('a.b', 'tasks[].x', 'files.<path>.sha256')."""
    values = [manifest]
    for part in key.split("."):
        step = []
        for v in values:
            if part == "<path>":
                step += list(v.values())
            elif part.endswith("[]"):
                step += v.get(part[:-2], [MISSING])
            elif isinstance(v, dict) and part in v:
                step.append(v[part])
            else:
                step.append(MISSING)
        values = step
    return values


MISSING = object()


@pytest.mark.slow
def test_exporter_writes_every_key_the_android_app_reads(android_int8):
    keys = json.loads((REPO / "android_demo" /
                       "manifest_keys.json").read_text())
    manifest = read_manifest(android_int8).to_dict()     # what the typed manifest writes
    always = {k.path for k in manifest_keys() if k.required}   # optional ones: when they apply
    for key in keys["required"] + [k for k in keys["optional"] if k in always]:
        values = manifest_values(manifest, key)
        assert values and all(v is not MISSING for v in values), key


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
       | st.sampled_from(["the film was good", "naïve café 😀", "日本語 text", "[CLS] x"]),
       pair=st.none() | st.text(max_size=30))
def test_runtime_tokenizer_matches_the_trunk_tokenizer(onnx_fp32, tiny_pal_run, text, pair):
    from transformers import AutoTokenizer
    reference = AutoTokenizer.from_pretrained(str(tiny_pal_run / "model" / "trunk"))
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    try:
        ids, mask, types = engine.tokenizer(text, pair, warn=False)
    except BundleError as e:       # the one refusal: empty or whitespace-only text
        assert "empty" in str(e)
        assert not text.strip() or (pair is not None and not pair.strip())
        return
    want = reference(text, pair, truncation="longest_first",
                     max_length=engine.tokenizer.max_length, return_token_type_ids=True)
    assert ids[0].tolist() == want["input_ids"]
    assert types[0].tolist() == want["token_type_ids"]
    out, _, _ = engine.run_ids("sst", ids, mask, types)     # and the runtime takes any of it
    assert np.isfinite(out).all()


def test_non_utf8_input_is_refused_in_one_line(onnx_fp32, capsys):
    from palkit import cli
    engine = Engine(load_bundle(onnx_fp32), "onnxruntime")
    undecodable = b"caf\xe9 film".decode("utf-8", "surrogateescape")  # how argv carries it
    with pytest.raises(BundleError, match=r"not valid UTF-8 \(at character 3\)"):
        engine.tokenizer(undecodable)
    assert cli.main(["predict", str(onnx_fp32), "--task", "sst", undecodable]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err


def test_crash_during_export_leaves_no_half_bundle(onnx_fp32, tiny_pal_run, tiny_data,
                                                    tmp_path, monkeypatch):
    import palkit.export.onnx_export as onnx_export
    out = tmp_path / "bundle"
    shutil.copytree(onnx_fp32, out)
    before = files_of(out)

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx_export, "write_adapter", crash)
    with pytest.raises(OSError, match="No space left"):
        export_run(tiny_pal_run, out,
                   ExportOptions(target="onnx", quant="fp32", data_dir=tiny_data, overwrite=True),
                   **QUIET)
    assert files_of(out) == before                        # the old bundle is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]   # no temporary folder left


@pytest.mark.slow
def test_executorch_int8_reexport_is_byte_identical(android_int8, tiny_pal_run, tiny_data,
                                                    tmp_path):
    again = tmp_path / "again"
    export_run(tiny_pal_run, again,
               ExportOptions(target="android", quant="int8", tasks=["quora"], data_dir=tiny_data),
               **QUIET)
    assert files_of(again) == files_of(android_int8)


@pytest.mark.slow
def test_bench_worker_runs_the_all_tasks_program(et_fp32, tiny_pal_run, tmp_path):
    from palkit.bench.run import run_worker
    from palkit.bench.subjects import discover

    subjects, _, notes = discover([et_fp32], [tiny_pal_run], ["executorch"], [], tmp_path)
    (pal,) = subjects
    # (bench's note that no separately fine-tuned models were given is about the run, not this)
    assert pal.all_tasks is not None and not [n for n in notes if "all-tasks" in n]
    listed = json.loads((et_fp32 / "manifest.json").read_text())["files"]
    assert pal.sizes["all_tasks_program_bytes"] == listed["executorch/all_tasks.pte"]["bytes"]
    assert pal.sizes["total_bytes"] == pal.sizes["trunk_bytes"] + \
        sum(pal.sizes["adapter_bytes"].values()) + pal.sizes["all_tasks_program_bytes"]
    spec = {"threads": 1, "seq_len": 16, "subject": pal.worker_subject()}
    lat = run_worker({**spec, "mode": "latency", "configs": ["task:sst", "all_tasks"],
                      "warmup": 1, "runs": 3, "min_seconds": 0.0, "max_seconds": 1.0}, 120)
    rows = {r["config"]: r for r in lat["rows"]}
    assert rows["all_tasks"]["all_tasks_mode"] == "program" and rows["all_tasks"]["p50_ms"] > 0
    loaded = run_worker({**spec, "mode": "load_program"}, 120)
    assert loaded["output_shapes"] == [[5], [1]]  # sst logits, sts score
    assert loaded["peak_rss"] >= loaded["rss_after_import"] > 0


@pytest.mark.slow
def test_bench_and_report_on_a_pal_bundle(et_fp32, tiny_pal_run, tiny_data, tmp_path):
    from palkit.bench.options import BenchOptions, LatencyBudget
    from palkit.bench.run import bench
    from palkit.bench.schema import load_bench_file
    from palkit.report.build import build_report

    out = tmp_path / "bench.json"
    bench([et_fp32], [tiny_pal_run], out, BenchOptions(
        peers=[], threads=[1], seq_lens=[8], timing=LatencyBudget(0, 2, 0.0, 0.5), splits=["dev"],
        data_dir=tiny_data, max_examples=4, work=tmp_path / "w", ceiling=False))
    data = load_bench_file(out)
    et = data["subjects"]["et-fp32/executorch"]
    listed = json.loads((et_fp32 / "manifest.json").read_text())["files"]
    assert et["bundle"]["all_tasks_program_bytes"] == listed["executorch/all_tasks.pte"]["bytes"]
    assert et["all_tasks_program"]
    assert et["memory_rss_bytes"]["model_all_tasks_program"] > 0
    assert et["bundle_dir"] == str(et_fp32)
    rows = {(r["subject"], r["config"]): r for r in data["results"]}
    assert rows[("et-fp32/executorch", "all_tasks")]["all_tasks_mode"] == "program"
    assert rows[("et-fp32/onnxruntime", "all_tasks")]["all_tasks_mode"] == "program"
    ort = data["subjects"]["et-fp32/onnxruntime"]
    assert ort["bundle"]["all_tasks_program_bytes"] == listed["onnx/all_tasks.onnx"]["bytes"]
    assert ort["bundle"]["trunk_bytes"] == listed["onnx/trunk.onnx"]["bytes"] + \
        listed["onnx/trunk.onnx.data"]["bytes"]
    assert set(data["accuracy"]) == {"et-fp32/executorch", "et-fp32/onnxruntime", "fp32:pals"}
    # The app's own C++ path is a subject of its own, timed in the same condition.
    from palkit.android_demo.host import native_host
    if native_host.missing_toolchain() is None:
        native = data["subjects"]["et-fp32/executorch-cpp"]
        assert native["role"] == "native" and native["memory_rss_bytes"]["model_one_task"] > 0
        assert rows[("et-fp32/executorch-cpp", "task:sst")]["p50_ms"] > 0
        assert rows[("et-fp32/executorch-cpp", "all_tasks")]["all_tasks_mode"] == "sequential"
    summary = build_report([out], [], tmp_path / "r", tmp_path / "summary.json").summary.values
    assert summary["all_tasks_ratio_all_layers"] > 0 and summary["memory_ratio_all_vs_one"] > 0


def test_adding_a_task_to_a_bundle_with_other_adapter_inputs_is_refused(copy_of, tiny_pal_run,
                                                                         tiny_data):
    # A bundle from a palkit whose ONNX adapters had other tensor names (e.g. before the int8
    # MatMulIntegerToFloat adapters): the new adapter would fail inside ONNX Runtime.
    edit_manifest(copy_of, lambda m: m["runtimes"]["onnxruntime"].update(adapter_inputs=[
        n.replace(".weight_t", ".weight") for n in m["runtimes"]["onnxruntime"]["adapter_inputs"]]))
    with pytest.raises(ExportError, match="re-export the bundle"):
        add_adapter(tiny_pal_run, "sst", copy_of, replace=True, data_dir=tiny_data, **QUIET)


@pytest.mark.slow
def test_executorch_reads_checked_task_files_at_load_and_loads_only_the_method_used(et_fp32):
    """A swap binds tensors read when the bundle loaded: the runner reads every task file that
    load_bundle checked, and a task not checked on its first use. `run_all` alone never loads
    `forward` (each loaded method packs the trunk again in Python)."""
    engine = Engine(load_bundle(et_fp32), "executorch")
    assert sorted(engine.impl.weights) == ["sst", "sts"] and engine.impl.methods == {}
    ids, mask, types = engine.tokenizer("how can i learn to cook", "why do dogs play")
    engine.run_all_ids(ids, mask, types)
    assert engine.impl.methods == {}
    lazy = Engine(load_bundle(et_fp32, runtime="executorch", tasks=[]), "executorch")
    assert lazy.impl.weights == {}
    alone = lazy.run_ids("sts", ids, mask, types)[0]
    assert list(lazy.impl.weights) == ["sts"] and list(lazy.impl.methods) == ["forward"]
    # after run_all a task's weights are views of the stacked tensors: the same bits out
    assert engine.run_ids("sts", ids, mask, types)[0].tobytes() == alone.tobytes()
