"""ONNX Runtime export: one `trunk.onnx` for all tasks plus one `.onnx_adapter` per task.

The graph is SwappableTrunk (export/programs.py) exported with the legacy TorchScript exporter,
its attention and the task's int8 matrix multiplies already written as ONNX Runtime's fused
kernels (export/onnx_ops.py), optionally int8 by quant/onnx_int8.py.
onnxruntime.transformers' optimize_model is not used: what it fused here (Gelu, BiasGelu) ONNX
Runtime fuses itself when a session starts, and its other fusions are either done already or
slower (see residual_sums). Adapter tensors are graph inputs during all of that, so nothing
folds them; at the end each gets a same-named zero initializer, which makes it an overridable
initializer that `RunOptions.add_active_adapter` replaces per run.
"""
from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from palkit.export import onnx_ops
from palkit.export.programs import SwappableTrunk, adapter_tensors
from palkit.runtime.manifest import TEXT_INPUTS
from palkit.trainer.model import PalBert, PalConfig

OPSET = 17


def export_trunk(model: PalBert, path: Path, int8: bool, example: tuple[torch.Tensor, ...],
                 graph: PalConfig | None, columns: int) -> dict[str, Any]:
    """Write trunk.onnx with PALs of placement `graph` (None: heads only); return the adapter
    input names and the fused kernels it holds."""
    import onnx
    from onnx import numpy_helper

    wrapper = SwappableTrunk(model, int8_adapters=int8, pal=graph, columns=columns).eval()
    names = wrapper.adapter_input_names()
    defaults = adapter_tensors(model, next(iter(model.tasks)), int8, graph, columns)
    args = tuple(example) + tuple(defaults[n] for n in names)
    dynamic = {**{n: {0: "batch", 1: "seq"} for n in TEXT_INPUTS},
               "logits": {0: "batch", 1: "rows"}}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        raw, quant = Path(tmp) / "raw.onnx", Path(tmp) / "q.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, args, str(raw), input_names=[*TEXT_INPUTS, *names],
                              output_names=["logits"], dynamic_axes=dynamic, opset_version=OPSET,
                              custom_opsets={onnx_ops.MS: 1}, dynamo=False,
                              do_constant_folding=True)
        if int8:
            from palkit.quant.mixed import float_weights
            from palkit.quant.onnx_int8 import quantize_trunk
            quantize_trunk(raw, quant, set(names), float_weights(model))
        graph = onnx.load(str(quant if int8 else raw))
    residual_sums(graph)
    present = {i.name for i in graph.graph.input}
    missing = [n for n in names if n not in present]
    if missing:
        raise RuntimeError(f"ONNX export lost adapter inputs {missing[:3]}")
    for n in names:
        zero = np.zeros_like(defaults[n].numpy())
        graph.graph.initializer.append(numpy_helper.from_array(zero, n))
    graph.producer_name, graph.producer_version = "palkit", "1"
    onnx.save(graph, str(path))
    fused = Counter(n.op_type for n in graph.graph.node if n.domain == onnx_ops.MS)
    return {"adapter_inputs": names, "fusions": dict(sorted(fused.items()))}


def residual_sums(graph) -> None:
    """Write each residual Add that feeds a LayerNormalization as a Sum (the same a + b). ONNX
    Runtime fuses Add + LayerNormalization into SkipLayerNormalization when a session starts,
    and that CPU kernel (1.31) is ~5x slower than the two ops it replaces ([1, 128, 384]: 0.26
    vs 0.05 ms, 13 times per MiniLM run); it does not look through Sum."""
    made = {o: n for n in graph.graph.node for o in n.output}
    for norm in graph.graph.node:
        add = made.get(norm.input[0]) if norm.op_type == "LayerNormalization" else None
        if add is not None and add.op_type == "Add":
            add.op_type = "Sum"


def write_adapter(model: PalBert, task: str, path: Path, int8: bool,
                  graph: PalConfig | None, columns: int) -> None:
    """The task's .onnx_adapter for a trunk.onnx of placement `graph`."""
    import onnxruntime as ort

    tensors = adapter_tensors(model, task, int8, graph, columns)
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()))
                        for k, v in sorted(tensors.items())})
    fmt.export_adapter(str(path))
