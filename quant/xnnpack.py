"""int8 for ExecuTorch/XNNPACK: dynamic-activation, per-channel symmetric int8 weights for every
linear (pt2e with XNNPACKQuantizer) and weight-only int8 embedding tables (torchao).

Used by export/executorch_export.py. Why each step is here: runtime/BUNDLE.md ("Design, and
why") and docs/int8-gate.md.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from palkit.quant.weights import PLAIN

# XNNPACK's qd8 x qc8w: activations in 255 steps, weights in [-127, 127] (XNNPACKQuantizer's
# symmetric config). Its kernels multiply these exactly on every x86 and ARM64 path
# (docs/int8-gate.md, "Every CPU").
RANGES = PLAIN

SCHEME = ("linears: int8 weights (symmetric, per output channel) with int8 dynamic activations "
          "(XNNPACKQuantizer via torchao pt2e); word embeddings: weight-only int8 per row "
          "(torchao IntxWeightOnlyConfig); position and token-type embeddings, LayerNorm, "
          "softmax and the PAL attention products stay fp32")


def quantize_embeddings(module: nn.Module) -> None:
    """Weight-only int8 per row for the word table (in place; the other tables stay fp32:
    quant/weights.py). padding_idx only matters for training gradients; ExecuTorch cannot lower
    it with the quantized table, so it is cleared."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    from palkit.quant.weights import is_int8_table

    def int8(m: nn.Module, fqn: str) -> bool:
        return isinstance(m, nn.Embedding) and is_int8_table(fqn)

    for name, m in module.named_modules():
        if int8(m, name):
            m.padding_idx = None
    quantize_(module, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
              filter_fn=int8)


_SCALAR_VARIANTS = {torch.ops.aten.add.Tensor: torch.ops.aten.add.Scalar,
                    torch.ops.aten.mul.Tensor: torch.ops.aten.mul.Scalar}


def scalarize_integer_ops(gm: torch.fx.GraphModule) -> None:
    """Rewrite `int_tensor + 3` / `int_tensor * 3` (aten .Tensor with a Python scalar) to the
    .Scalar overloads, so the quantizer does not turn the scalar into a float tensor (which breaks
    integer index arithmetic during calibration)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SCALAR_VARIANTS:
            continue
        a, b = node.args[:2]
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(b, (int, float)) and val is not None and not val.dtype.is_floating_point:
            node.target = _SCALAR_VARIANTS[node.target]
    gm.recompile()


def quantize_linears_pt2e(ep: torch.export.ExportedProgram, calibration: list[tuple[Any, ...]],
                          dynamic_shapes: Any) -> torch.export.ExportedProgram:
    """Dynamic int8 linears via pt2e (except FloatLinear ones: quant/mixed.py); returns the
    re-exported, converted program."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from palkit.quant.mixed import FloatLinear

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    quantizer.set_module_type(FloatLinear, None)  # layers the int8 gate's fallback kept in float
    gm = ep.module()
    scalarize_integer_ops(gm)
    prepared = prepare_pt2e(gm, quantizer)
    with torch.no_grad():
        for args in calibration:
            prepared(*args)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, calibration[0], dynamic_shapes=dynamic_shapes)


