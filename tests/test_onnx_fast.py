"""The swappable ONNX graph's fast form (export/onnx_ops.py): fused attention kernels, int8 adapter
matrices multiplied as int8, residual sums that ONNX Runtime cannot turn into its slow
SkipLayerNormalization. It still computes the PyTorch model, for every task swapped into one
session and for any PAL placement."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from palkit.export.onnx_export import export_trunk, save_sharing_weights, write_adapter
from palkit.export.programs import graph_pal, output_columns, reference_outputs
from palkit.trainer.checkpoint import load_model, resolve_model_dir

FP32_TOL = 1e-5   # fp32 graph vs PyTorch, absolute (outputs here are O(0.01..5))
INT8_TOL = 0.05   # int8 graph vs PyTorch, relative to the largest output


def inputs(vocab: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Three sequences of 12 tokens: unpadded, right-padded, and with a hole in the mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, 2:4] = 0
    types = torch.zeros(3, 12, dtype=torch.long)
    types[:, 6:] = 1
    return ids, mask, types


def export(model, folder: Path, int8: bool, tasks: list[str]):
    """trunk.onnx and the tasks' adapters in `folder`; one session and one RunOptions per task."""
    import onnxruntime as ort

    folder.mkdir()
    ids, mask, types = inputs(model.trunk.config.vocab_size, seed=1)
    graph = graph_pal([model.task_pal(t) for t in tasks])
    proto, _ = export_trunk(model, int8, (ids[:1], mask[:1], types[:1]), graph,
                            output_columns(model), folder)
    save_sharing_weights({folder / "trunk.onnx": proto}, folder / "trunk.onnx.data")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(folder / "trunk.onnx"), opts,
                                   providers=["CPUExecutionProvider"])
    runs, adapters = {}, []
    for task in tasks:
        write_adapter(model, task, folder / f"{task}.onnx_adapter", int8, graph,
                      output_columns(model))
        adapter = ort.LoraAdapter()
        adapter.Load(str(folder / f"{task}.onnx_adapter"))
        adapters.append(adapter)  # must outlive the run options that name it
        runs[task] = ort.RunOptions()
        runs[task].add_active_adapter(adapter)
    session.adapters = adapters
    return session, runs


def worst_difference(model, session, runs, order: list[str]) -> dict[str, float]:
    """Per task: (max |graph - PyTorch|, max |PyTorch|) over `inputs`."""
    ids, mask, types = inputs(model.trunk.config.vocab_size)
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
            "token_type_ids": types.numpy()}
    worst: dict[str, tuple[float, float]] = {}
    for task in order:  # swapped back and forth within one session
        ref = reference_outputs(model, task, ids, mask, types).numpy()
        got = session.run(["logits"], feed, runs[task])[0][:, 0, : ref.shape[1]]  # the sentence row
        worst[task] = (float(np.abs(got - ref).max()), float(np.abs(ref).max()))
    return worst


@pytest.fixture(scope="module")
def tiny_model(tiny_pal_run):
    model, _, _ = load_model(resolve_model_dir(tiny_pal_run))
    return model


def test_fp32_graph_equals_pytorch_for_two_tasks_swapped_in_one_session(tiny_model, tmp_path):
    session, runs = export(tiny_model, tmp_path / "fp32", False, ["sst", "sts"])
    for task, (diff, _) in worst_difference(tiny_model, session, runs,
                                            ["sst", "sts", "sst", "sts"]).items():
        assert diff < FP32_TOL, (task, diff)


def test_int8_graph_is_close_to_pytorch_and_runs_adapters_as_int8(tiny_model, tmp_path):
    session, runs = export(tiny_model, tmp_path / "int8", True, ["sst", "quora"])
    for task, (diff, scale) in worst_difference(tiny_model, session, runs,
                                                ["quora", "sst", "quora"]).items():
        assert diff < INT8_TOL * scale, (task, diff, scale)
    graph = onnx.load(str(tmp_path / "int8" / "trunk.onnx")).graph
    readers = {i: n.op_type for n in graph.node for i in n.input}
    int8_inputs = [i.name for i in graph.input if i.name.endswith(".int8")]
    assert int8_inputs and {readers[n] for n in int8_inputs} == {"MatMulIntegerToFloat"}
    check_fast_form(graph, tiny_model)


def check_fast_form(graph, model) -> None:
    """One MultiHeadAttention per trunk layer and per PAL, no SkipLayerNormalization, and every
    LayerNormalization reads a Sum (which ONNX Runtime does not fuse into one)."""
    ops = [n.op_type for n in graph.node]
    layers, pals = model.trunk.config.num_hidden_layers, len(model.pal.layers)
    assert ops.count("MultiHeadAttention") == layers + pals
    assert "Softmax" not in ops and "SkipLayerNormalization" not in ops
    made = {o: n.op_type for n in graph.node for o in n.output}
    assert {made[n.input[0]] for n in graph.node if n.op_type == "LayerNormalization"} == {"Sum"}


@pytest.mark.parametrize("layers, share", [((1,), True), ((0,), False)])
def test_any_placement_exports_and_runs(tiny_bert, tmp_path, layers, share):
    """PALs in one layer of two (top-1, and the bottom one with per-layer V^E/V^D)."""
    from transformers import BertModel

    from palkit.trainer.model import PalBert, PalConfig
    from palkit.trainer.tasks import resolve_tasks

    torch.manual_seed(0)
    model = PalBert(BertModel.from_pretrained(tiny_bert), resolve_tasks(["sst", "sts"]),
                    PalConfig(size=8, heads=2, layers=layers, share_projections=share)).eval()
    session, runs = export(model, tmp_path / "fp32", False, ["sst", "sts"])
    for task, (diff, _) in worst_difference(model, session, runs, ["sts", "sst"]).items():
        assert diff < FP32_TOL, (task, diff)
    session, runs = export(model, tmp_path / "int8", True, ["sst", "sts"])
    for task, (diff, scale) in worst_difference(model, session, runs, ["sts", "sst"]).items():
        assert diff < INT8_TOL * scale, (task, diff, scale)
    check_fast_form(onnx.load(str(tmp_path / "int8" / "trunk.onnx")).graph, model)
