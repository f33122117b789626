"""int8 for ONNX Runtime: `quantize_dynamic` (int8 per-channel weights, dynamic int8 activations)
on the trunk's MatMuls, leaving the nodes that read adapter inputs untouched so those inputs stay
overridable per run (they are int8 already: export/onnx_ops.py), and the trunk Linears the int8
gate's fallback keeps in float (quant/mixed.py)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

SCHEME = ("trunk MatMuls: int8 per-channel weights with dynamic int8 activations (onnxruntime "
          "quantize_dynamic); embedding tables (Gather): 8-bit weight-only, as quantize_dynamic "
          "does for Gather; adapter matrices: int8 per output column with fp32 scales, "
          "multiplied as int8 with dynamic int8 activations (MatMulIntegerToFloat), never "
          "dequantized; "
          "LayerNorm and attention (MultiHeadAttention) fp32")


def _key(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def float_nodes(model, float_weights: dict[str, np.ndarray]) -> list[str]:
    """The MatMul/Gemm nodes whose weight initializer is one of `float_weights` (matched by
    content: the legacy exporter's node names do not say which module a MatMul came from, and
    constant folding stores a Linear's weight transposed)."""
    from onnx import numpy_helper

    wanted = {}
    for name, w in float_weights.items():
        wanted[_key(w)] = wanted[_key(w.T)] = name
    inits = {i.name: i for i in model.graph.initializer}
    found, nodes = set(), []
    for n in model.graph.node:
        if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits:
            name = wanted.get(_key(numpy_helper.to_array(inits[n.input[1]])))
            if name is not None:
                found.add(name)
                nodes.append(n.name)
    missing = sorted(set(float_weights) - found)
    if missing:
        raise RuntimeError(f"no ONNX MatMul found for the float layers {missing}")
    return nodes


def quantize_trunk(src: Path, dst: Path, adapter_inputs: set[str],
                   float_weights: dict[str, np.ndarray] | None = None) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    excluded = sorted(n.name for n in model.graph.node if any(i in adapter_inputs for i in n.input))
    excluded += float_nodes(model, float_weights or {})
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     nodes_to_exclude=excluded,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
