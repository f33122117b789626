"""int8 for ONNX Runtime: `quantize_dynamic` (int8 per-channel weights, dynamic int8 activations)
on the trunk's MatMuls, leaving the nodes that read adapter inputs untouched so those inputs stay
overridable per run (they are int8 already: export/onnx_ops.py)."""
from __future__ import annotations

from pathlib import Path

SCHEME = ("trunk MatMuls: int8 per-channel weights with dynamic int8 activations (onnxruntime "
          "quantize_dynamic); embedding tables (Gather): 8-bit weight-only, as quantize_dynamic "
          "does for Gather; adapter matrices: int8 per output column with fp32 scales, "
          "multiplied as int8 with dynamic int8 activations (MatMulIntegerToFloat), never "
          "dequantized; "
          "LayerNorm and attention (MultiHeadAttention) fp32")


def quantize_trunk(src: Path, dst: Path, adapter_inputs: set[str]) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    excluded = sorted(n.name for n in model.graph.node if any(i in adapter_inputs for i in n.input))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     nodes_to_exclude=excluded,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
