"""ONNX Runtime export: one `trunk.onnx` for all tasks plus one `.onnx_adapter` per task.

The graph is SwappableTrunk (export/programs.py) exported with the legacy TorchScript exporter
(ORT's BERT fusions recognise its attention), optimised with onnxruntime.transformers'
optimize_model, optionally int8 with quantize_dynamic (adapter nodes excluded). Adapter tensors are
graph inputs during all of that, so nothing folds them; at the end each gets a same-named zero
initializer, which makes it an overridable initializer that `RunOptions.add_active_adapter`
replaces per run.
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export.programs import TEXT_INPUTS, SwappableTrunk, adapter_tensors
from trainer.model import PalBert

OPSET = 17


def export_trunk(model: PalBert, path: Path, int8: bool, example: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """Write trunk.onnx; return the adapter input names and the fusions ORT applied."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.transformers.optimizer import optimize_model

    wrapper = SwappableTrunk(model, int8_adapters=int8).eval()
    names = wrapper.adapter_input_names()
    first = next(iter(model.tasks))
    defaults = adapter_tensors(model, first, int8)
    args = tuple(example) + tuple(defaults[n] for n in names)
    dynamic = {n: {0: "batch", 1: "seq"} for n in TEXT_INPUTS}
    cfg = model.trunk.config
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        raw, opt, quant = (Path(tmp) / f for f in ("raw.onnx", "opt.onnx", "q.onnx"))
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, args, str(raw), input_names=[*TEXT_INPUTS, *names],
                              output_names=["logits"], dynamic_axes=dynamic, opset_version=OPSET,
                              dynamo=False, do_constant_folding=True)
        optimized = optimize_model(str(raw), model_type="bert", num_heads=cfg.num_attention_heads,
                                   hidden_size=cfg.hidden_size, opt_level=0)
        fusions = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
        optimized.save_model_to_file(str(opt))
        src = opt
        if int8:
            from quant.onnx_int8 import quantize_trunk
            quantize_trunk(opt, quant, set(names))
            src = quant
        graph = onnx.load(str(src))
    present = {i.name for i in graph.graph.input}
    missing = [n for n in names if n not in present]
    if missing:
        raise RuntimeError(f"ONNX export lost adapter inputs {missing[:3]}")
    for n in names:
        zero = np.zeros_like(defaults[n].numpy())
        graph.graph.initializer.append(numpy_helper.from_array(zero, n))
    graph.producer_name, graph.producer_version = "palkit", "1"
    onnx.save(graph, str(path))
    return {"adapter_inputs": names, "fusions": fusions,
            "ops": sorted({n.op_type for n in graph.graph.node})}


def write_adapter(model: PalBert, task: str, path: Path, int8: bool) -> None:
    import onnxruntime as ort

    tensors = adapter_tensors(model, task, int8)
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()))
                        for k, v in sorted(tensors.items())})
    fmt.export_adapter(str(path))
