"""ONNX Runtime export: one-task graphs (`trunk.onnx`, and in a bundle whose tasks' placements
differ one per other placement; a task's `.onnx_adapter` chooses the task per run) and, for
several tasks, `all_tasks.onnx` (every task on one input, the trunk run once), all reading their
weights from one shared `trunk.onnx.data`.

Each graph is SwappableTrunk (export/programs.py) exported with the legacy TorchScript exporter,
its attention and the task's int8 matrix multiplies already written as ONNX Runtime's fused
kernels (export/onnx_ops.py), optionally int8 by quant/onnx_int8.py.
onnxruntime.transformers' optimize_model is not used: what it fused here (Gelu, BiasGelu) ONNX
Runtime fuses itself when a session starts, and its other fusions are either done already or
slower (see residual_sums). Adapter tensors are graph inputs during all of that, so nothing
folds them; at the end each of a one-task graph's gets a same-named zero initializer, which makes
it an overridable initializer that `RunOptions.add_active_adapter` replaces per run.
"""
from __future__ import annotations

import hashlib
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from palkit.export import onnx_ops
from palkit.export.programs import SwappableTrunk, adapter_tensors, fits_graph
from palkit.runtime.manifest import TEXT_INPUTS
from palkit.trainer.model import PalBert, PalConfig

OPSET = 17
SHARED_MIN_BYTES = 1024  # smaller tensors (scalars, shapes) stay inside their graph
WEIGHT_ALIGN = 64        # each shared tensor starts on a cache line


def export_trunk(model: PalBert, int8: bool, example: tuple[torch.Tensor, ...],
                 graph: PalConfig | None, columns: int, work: Path) -> tuple[Any, dict[str, Any]]:
    """A one-task graph (trunk.onnx, head.onnx, ...) with PALs of placement `graph` (None: heads
    only), every task input an overridable initializer (zeros: an .onnx_adapter sets them);
    returns the graph, its adapter input names and the fused kernels it holds. Intermediate
    files go to a temporary folder in `work`."""
    from onnx import numpy_helper

    wrapper = SwappableTrunk(model, int8_adapters=int8, pals=[graph], columns=columns)
    names = wrapper.adapter_input_names()
    example_task = next(t for t in model.tasks if fits_graph(model.task_pal(t), graph))
    defaults = adapter_tensors(model, example_task, int8, graph, columns)
    proto = trace_graph(model, wrapper, {n: defaults[n] for n in names}, example, int8, work)
    for n in names:
        zero = np.zeros_like(defaults[n].numpy())
        proto.graph.initializer.append(numpy_helper.from_array(zero, n))
    fused = Counter(n.op_type for n in proto.graph.node if n.domain == onnx_ops.MS)
    return proto, {"adapter_inputs": names, "fusions": dict(sorted(fused.items()))}


def export_all_tasks(model: PalBert, tasks: list[str], int8: bool,
                     example: tuple[torch.Tensor, ...], columns: int, work: Path) -> Any:
    """all_tasks.onnx: every task of `tasks` on one input with its own PALs (none for a head),
    the trunk run once up to where the PALs begin. Its inputs are each task's .onnx_adapter
    tensors (laid out for the task's own placement) named `task/name`: plain inputs, which the
    runner feeds from the adapter files."""
    pals = [model.task_pal(t) for t in tasks]
    wrapper = SwappableTrunk(model, int8_adapters=int8, pals=pals, columns=columns)
    inputs = {}
    for slot, (task, pal) in enumerate(zip(tasks, pals)):
        tensors = adapter_tensors(model, task, int8, pal, columns)
        inputs.update({all_tasks_input(task, n): tensors[n]
                       for n in wrapper.adapter_input_names(slot)})
    return trace_graph(model, wrapper, inputs, example, int8, work)


def all_tasks_input(task: str, name: str) -> str:
    """The all-tasks graph's input for a task's .onnx_adapter tensor `name`."""
    return f"{task}/{name}"


def trace_graph(model: PalBert, wrapper: SwappableTrunk, inputs: dict[str, torch.Tensor],
                example: tuple[torch.Tensor, ...], int8: bool, work: Path) -> Any:
    """`wrapper` exported with the text inputs and `inputs` (task tensors by input name),
    int8 when asked (task inputs keep their own int8), residual sums written; the raw and
    int8 files in a temporary folder in `work` (the bundle's build folder: a system /tmp may
    be small or in memory)."""
    import onnx

    dynamic = {**{n: {0: "batch", 1: "seq"} for n in TEXT_INPUTS},
               "logits": {0: "rows", 1: "positions"}}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        raw, quant = Path(tmp) / "raw.onnx", Path(tmp) / "q.onnx"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper.eval(), tuple(example) + tuple(inputs.values()), str(raw),
                              input_names=[*TEXT_INPUTS, *inputs], output_names=["logits"],
                              dynamic_axes=dynamic, opset_version=OPSET,
                              custom_opsets={onnx_ops.MS: 1}, dynamo=False,
                              do_constant_folding=True)
        if int8:
            from palkit.quant.mixed import float_weights
            from palkit.quant.onnx_int8 import quantize_trunk
            quantize_trunk(raw, quant, set(inputs), float_weights(model))
        proto = onnx.load(str(quant if int8 else raw))
    residual_sums(proto)
    present = {i.name for i in proto.graph.input}
    missing = [n for n in inputs if n not in present]
    if missing:
        raise RuntimeError(f"ONNX export lost task inputs {missing[:3]}")
    proto.producer_name, proto.producer_version = "palkit", "1"
    return proto


def save_sharing_weights(graphs: dict[Path, Any], data: Path) -> None:
    """Save each graph with its weights in one external data file `data` beside them, each
    distinct tensor written once: trunk.onnx and all_tasks.onnx hold the same trunk, so the
    second graph adds only its own nodes to the bundle. Tensors under SHARED_MIN_BYTES stay in
    their graph."""
    import onnx
    from onnx.external_data_helper import set_external_data

    placed: dict[bytes, tuple[int, int]] = {}
    with open(data, "wb") as f:
        for path, proto in graphs.items():
            for tensor in proto.graph.initializer:
                raw = tensor.raw_data
                if len(raw) < SHARED_MIN_BYTES:
                    continue
                key = hashlib.sha256(raw).digest()
                if key not in placed:
                    f.write(b"\0" * (-f.tell() % WEIGHT_ALIGN))
                    placed[key] = (f.tell(), len(raw))
                    f.write(raw)
                set_external_data(tensor, data.name, *placed[key])
                tensor.ClearField("raw_data")
                tensor.data_location = onnx.TensorProto.EXTERNAL
            onnx.save(proto, str(path))


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
