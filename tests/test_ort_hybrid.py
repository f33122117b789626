"""ONNX Runtime bundles of a hybrid run: one trunk.onnx whose PAL placement is the union of the
tasks' (a V^E/V^D per layer), every task an .onnx_adapter with zeros where it has no PAL.

The hybrid run (tests/conftest.py): sst, quora, sts with PALs in both layers of the tiny BERT
(one shared V^E/V^D), cfimdb and dup heads only, para (a pair task) with PALs in layer 1.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from palkit.export.bundle import ExportError, add_adapter, export_run
from palkit.export.gate import Gate
from palkit.export.options import ExportOptions
from palkit.export.programs import (adapter_in_graph, adapter_tensors, fits_graph, graph_pal,
                                    output_columns, reference_outputs)
from palkit.quant.weights import quantize_rows
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.manifest import BundleError, read_manifest, write_manifest
from palkit.trainer.checkpoint import load_model, sha256_file
from palkit.trainer.model import PalConfig

QUIET = dict(log=lambda *a: None)
TASKS = ["sst", "quora", "cfimdb", "para"]  # launch PALs, launch PALs, a head, PALs on top
TEXTS = [("the movie was good", "a fine film"), ("a man is running", "a man runs"),
         ("nothing here works at all", "everything works")]
UNION = {"size": 8, "heads": 2, "layers": [0, 1], "share_projections": False}


def pal(layers: tuple[int, ...], share: bool = True, size: int = 8) -> PalConfig:
    return PalConfig(size, 2, layers, share)


def reference(model, task: str, ids, mask, types) -> np.ndarray:
    tensors = (torch.from_numpy(x) for x in (ids, mask, types))
    return reference_outputs(model, task, *tensors)[0].numpy()


def outputs(bundle: Path, task: str, runtime: str = "onnxruntime") -> list[np.ndarray]:
    engine = Engine(load_bundle(bundle), runtime)
    return [engine.run_ids(task, *engine.tokenizer(*texts))[0] for texts in TEXTS]


def encoded(bundle: Path) -> list[tuple[np.ndarray, ...]]:
    engine = Engine(load_bundle(bundle), "onnxruntime")
    return [engine.tokenizer(*texts) for texts in TEXTS]


@pytest.fixture(scope="module")
def model(hybrid_run: Path):
    return load_model(hybrid_run / "model")[0]


@pytest.fixture(scope="module")
def ort_hybrid(hybrid_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 bundle of both runtimes (`--target android`) of the hybrid run. Read-only."""
    out = tmp_path_factory.mktemp("b") / "ort-hybrid"
    export_run(hybrid_run, out,
               ExportOptions(target="android", quant="fp32", tasks=TASKS, data_dir=tiny_data),
               **QUIET)
    return out


def test_the_graph_takes_the_union_of_the_tasks_placements():
    launch, top = pal((0, 1)), pal((1,))
    assert graph_pal([None, None]) is None
    assert graph_pal([launch, None, launch]) == launch          # one placement: kept as it is
    assert graph_pal([launch, top, None]) == pal((0, 1), share=False)
    assert graph_pal([pal((1,)), pal((3,))]) == pal((1, 3), share=False)
    union = pal((0, 1), share=False)
    assert fits_graph(None, None) and fits_graph(None, launch) and fits_graph(launch, launch)
    assert fits_graph(top, union) and fits_graph(launch, union)
    assert not fits_graph(top, launch)         # one V^E/V^D for both layers: no zero layer
    assert not fits_graph(top, None)
    assert not fits_graph(pal((2,)), union)
    assert not fits_graph(pal((1,), size=12), union)


def test_zero_pals_add_exactly_nothing(model):
    """A task's PALs laid out in the union graph give its own forward: bit for bit in PyTorch
    (a zero V^D adds gelu(0) = 0), for a head-only task and one with PALs in one layer."""
    graph = pal((0, 1), share=False)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.trunk.config.vocab_size, (2, 9), generator=g)
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    for task in ("cfimdb", "para"):
        own = model(ids, mask, types, task)
        laid = adapter_in_graph(model.adapters[task] if task in model.adapters else None, graph,
                                model.trunk.config.hidden_size)
        assert laid.cfg == graph
        original = dict(model.adapters)
        try:
            model.adapters[task] = laid
            with torch.no_grad():
                assert torch.equal(model(ids, mask, types, task), own)
        finally:
            model.adapters.clear()
            model.adapters.update(original)
    # int8: all-zero rows quantize to zeros with a finite scale (no NaN)
    q, scale = quantize_rows(torch.zeros(4, 8))
    assert torch.equal(q, torch.zeros(4, 8, dtype=torch.int8))
    assert torch.isfinite(scale).all() and (scale > 0).all()
    tensors = adapter_tensors(model, "cfimdb", True, graph, output_columns(model))
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())
    assert not tensors["pal.decoders.1.weight_t.int8"].any()


@pytest.mark.slow
def test_hybrid_bundle_runs_every_task_as_its_own_forward(ort_hybrid: Path, model):
    m = read_manifest(ort_hybrid)
    assert m.runtime_names == ["executorch", "onnxruntime"]
    assert m.trunk.pal["layers"] == [0, 1] and m.trunk.pal["share_projections"]
    assert m.onnx_graph_pal() == UNION
    assert json.loads((ort_hybrid / "manifest.json").read_text())["runtimes"]["onnxruntime"][
        "pal"] == UNION
    # trunk.onnx (the union: a task added later that fits runs in it) takes both layers' PALs,
    # each with its own V^E/V^D; each exported task runs in its own placement's graph, and its
    # adapter file holds only its own tensors
    assert "pal.decoders.1.bias" in m.runtimes["onnxruntime"].adapter_inputs
    graphs = {t: m.onnx_graph(m.adapter(t)) for t in TASKS}
    assert {t: g.model for t, g in graphs.items()} == {
        "sst": "onnx/pal_0_1.onnx", "quora": "onnx/pal_0_1.onnx", "cfimdb": "onnx/head.onnx",
        "para": "onnx/pal_1.onnx"}
    assert graphs["sst"].pal == m.trunk.pal and graphs["cfimdb"].pal is None
    import onnxruntime as ort
    head = ort.AdapterFormat.read_adapter(str(ort_hybrid / "onnx" / "cfimdb.onnx_adapter"))
    assert sorted(head.get_parameters()) == sorted(graphs["cfimdb"].adapter_inputs)
    assert not [n for n in graphs["cfimdb"].adapter_inputs if n.startswith("pal.")]
    for task in TASKS:
        for runtime in ("onnxruntime", "executorch"):
            for got, x in zip(outputs(ort_hybrid, task, runtime), encoded(ort_hybrid)):
                np.testing.assert_allclose(got, reference(model, task, *x), atol=1e-4,
                                           err_msg=f"{runtime}/{task}")
    verify = json.loads((ort_hybrid / "verify.json").read_text())
    assert verify["passed"]
    assert set(verify["runtimes"]["onnxruntime"]["tasks"]) == set(TASKS)


@pytest.mark.slow
def test_head_only_task_runs_the_plain_trunk(ort_hybrid: Path, model):
    """cfimdb's zero PALs in the union graph: transformers' BertModel, its pooler, the head."""
    for got, (ids, mask, types) in zip(outputs(ort_hybrid, "cfimdb"), encoded(ort_hybrid)):
        with torch.no_grad():
            pooled = model.trunk(input_ids=torch.from_numpy(ids),
                                 attention_mask=torch.from_numpy(mask),
                                 token_type_ids=torch.from_numpy(types)).pooler_output
            plain = model.heads["cfimdb"](pooled)[0].numpy()
        np.testing.assert_allclose(got, plain, atol=1e-4)


@pytest.mark.slow
def test_all_tasks_graph_runs_every_task_in_one_call(ort_hybrid: Path, model):
    """all_tasks.onnx: the head-only task reads the plain trunk, each PAL task its own PALs;
    each output is the task's own forward, and the trunk runs once below each task's first PAL
    layer (one MultiHeadAttention there, not one per task)."""
    import onnx
    m = read_manifest(ort_hybrid)
    assert m.all_tasks("onnxruntime").tasks == TASKS
    engine = Engine(load_bundle(ort_hybrid), "onnxruntime")
    for texts in TEXTS:
        ids, mask, types = engine.tokenizer(*texts)
        outs, _ = engine.run_all_ids(ids, mask, types)
        assert list(outs) == TASKS
        for task in TASKS:
            np.testing.assert_allclose(outs[task], reference(model, task, ids, mask, types),
                                       atol=1e-4, err_msg=task)
    graph = onnx.load(str(ort_hybrid / "onnx" / "all_tasks.onnx"), load_external_data=False)
    attentions = [n for n in graph.graph.node if n.op_type == "MultiHeadAttention"]
    # layer 0: the trunk once + sst's and quora's PALs; layer 1: (trunk + PAL) for each of those
    # two, the plain trunk once (cfimdb reads it, para's PAL joins it) + para's PAL
    assert len(attentions) == (1 + 2) + (2 * 2 + 1 + 1)
    from palkit.runtime.inputs import Texts
    assert [p.task for p in engine.predict_all(Texts("a man is running", "a man runs"))] == \
        ["quora", "para"]


def test_int8_hybrid_bundle_is_close_to_pytorch(hybrid_run: Path, tiny_data: Path, model,
                                                tmp_path: Path):
    out = tmp_path / "int8"
    export_run(hybrid_run, out,
               ExportOptions(target="onnx", quant="int8", tasks=["sst", "cfimdb", "para"], data_dir=tiny_data, gate=Gate(max_drop=None, min_agreement=0.0,
                                             max_float_layers=0)),
               **QUIET)
    assert read_manifest(out).onnx_graph_pal() == UNION
    for task in ("sst", "cfimdb", "para"):
        for got, x in zip(outputs(out, task), encoded(out)):
            want = reference(model, task, *x)
            assert np.isfinite(got).all()
            # int8 weights and per-token int8 activations (as tests/test_onnx_fast.py)
            assert np.abs(got - want).max() <= 0.05 * np.abs(want).max(), task


@pytest.mark.slow
def test_a_fitting_task_is_an_adapter_file(ort_hybrid: Path, hybrid_run: Path, tiny_data: Path,
                                           model, tmp_path: Path, monkeypatch):
    """Into the union graph: a head-only task, and a PAL task in some of its layers (replaced),
    each only its .onnx_adapter and a new manifest; no export, trunk.onnx the same bytes."""
    from palkit.export import onnx_export
    bundle = tmp_path / "bundle"
    shutil.copytree(ort_hybrid, bundle)
    before = {p.relative_to(bundle).as_posix(): sha256_file(p) for p in bundle.rglob("*")
              if p.is_file()}

    def no_export(*args, **kwargs):
        raise AssertionError("exported a graph to add a task")

    monkeypatch.setattr(onnx_export, "export_trunk", no_export)
    add_adapter(hybrid_run, "dup", bundle, data_dir=tiny_data, **QUIET)
    after = {p.relative_to(bundle).as_posix(): sha256_file(p) for p in bundle.rglob("*")
             if p.is_file()}
    changed = {rel for rel in after if before.get(rel) != after[rel]}
    assert changed == {"onnx/dup.onnx_adapter", "executorch/dup.safetensors", "manifest.json",
                       "verify.json"}
    assert after["onnx/trunk.onnx"] == before["onnx/trunk.onnx"]
    for got, x in zip(outputs(bundle, "dup"), encoded(bundle)):
        np.testing.assert_allclose(got, reference(model, "dup", *x), atol=1e-4)
    add_adapter(hybrid_run, "para", bundle, replace=True, data_dir=tiny_data, **QUIET)
    assert sha256_file(bundle / "onnx" / "trunk.onnx") == before["onnx/trunk.onnx"]
    assert sha256_file(bundle / "onnx" / "para.onnx_adapter") == before["onnx/para.onnx_adapter"]


def test_a_task_that_does_not_fit_the_graph_is_refused(hybrid_run: Path, tiny_data: Path,
                                                       tmp_path: Path):
    """sst and cfimdb: the graph is sst's own placement (one V^E/V^D shared by both layers),
    which cannot leave layer 0 out for para."""
    bundle = tmp_path / "bundle"
    export_run(hybrid_run, bundle,
               ExportOptions(target="onnx", quant="fp32", tasks=["sst", "cfimdb"], data_dir=tiny_data),
               **QUIET)
    assert read_manifest(bundle).onnx_graph_pal() == read_manifest(bundle).trunk.pal
    manifest = (bundle / "manifest.json").read_bytes()
    with pytest.raises(ExportError) as e:
        add_adapter(hybrid_run, "para", bundle, data_dir=tiny_data, **QUIET)
    assert str(e.value) == (
        "task 'para' has PALs in layers [1], which this bundle's trunk.onnx (PALs in layers "
        "[0, 1], one V^E/V^D shared) cannot run; `palkit export RUN --overwrite` re-exports the "
        "bundle with a graph for all its tasks")
    assert (bundle / "manifest.json").read_bytes() == manifest
    assert not (bundle / "onnx" / "para.onnx_adapter").exists()


def test_a_bundle_from_before_the_graph_field_has_the_trunk_placement(ort_hybrid: Path,
                                                                      tmp_path: Path):
    bundle = tmp_path / "old"
    shutil.copytree(ort_hybrid, bundle)
    raw = json.loads((bundle / "manifest.json").read_text())
    del raw["runtimes"]["onnxruntime"]["pal"]
    (bundle / "manifest.json").write_text(json.dumps(raw, indent=2, sort_keys=True))
    old = read_manifest(bundle)
    assert old.onnx_graph_pal() == old.trunk.pal
    write_manifest(tmp_path, old)  # read as it was, written back without the field
    assert "pal" not in json.loads((tmp_path / "manifest.json").read_text())["runtimes"][
        "onnxruntime"]
    for bad in ("trunk.pal", {"layers": [0, 7]}):
        raw["runtimes"]["onnxruntime"]["pal"] = bad
        (bundle / "manifest.json").write_text(json.dumps(raw))
        with pytest.raises(BundleError, match="runtimes.onnxruntime.pal"):
            read_manifest(bundle)
