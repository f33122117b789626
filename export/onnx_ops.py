"""The swappable ONNX graph's hot spots, written as the kernels ONNX Runtime runs fastest.

Each op is a torch.autograd.Function: `forward` is the PyTorch math (what tracing runs),
`symbolic` is what the legacy exporter writes.

* `linear`: a task's Linear, whose matrix is a graph input (one .onnx_adapter per task), stored
  transposed ([in, out], the layout the kernels read). int8: the matrix stays int8 with one fp32
  scale per output column, run as DynamicQuantizeLinear (int8 activations) + com.microsoft
  MatMulIntegerToFloat (int8 GEMM, scales and bias in one kernel), never dequantized to fp32.
  fp32: MatMul + Add.
* `fused_attention()`: while the graph is traced, every self-attention of trainer/model.py
  (the trunk's and the PALs') is written as one com.microsoft MultiHeadAttention (scale
  1/sqrt(head size), the raw [batch, seq] mask as its key padding mask) instead of ~15 small
  ops. onnxruntime.transformers' own attention fusion cannot do this for us: it matches only
  the op sequences transformers exports, and no layer whose input also feeds a PAL's V^E.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch.autograd import Function

import palkit.trainer.model as model_code

MS = "com.microsoft"
_reference_attention = model_code.multi_head_attention


def dequantized(given: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The fp32 [in, out] matrix of a given (weight_t,) or (int8 weight_t, scale)."""
    if len(given) == 1:
        return given[0]
    q, scale = given
    return q.to(torch.float32) * scale


def _omitted(g):
    """An optional ONNX input left out."""
    none = g.op("prim::Constant")
    none.setType(torch._C.OptionalType.ofTensor())
    return none


class _Linear(Function):
    @staticmethod
    def forward(ctx, x, bias, *given):  # noqa: D102  (the math tracing runs)
        return x @ dequantized(given) + bias

    @staticmethod
    def symbolic(g, x, bias, *given):  # noqa: D102
        if len(given) == 1:
            return g.op("Add", g.op("MatMul", x, given[0]), bias)
        q, scale = given
        xq, x_scale, x_zero = g.op("DynamicQuantizeLinear", x, outputs=3)
        out = g.op(f"{MS}::MatMulIntegerToFloat", xq, q, x_scale, scale, x_zero, _omitted(g), bias)
        out.setType(x.type().with_sizes([None] * (x.type().dim() - 1) + [q.type().sizes()[1]]))
        return out


class _Attention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, attention_mask, heads):  # noqa: D102
        return _reference_attention(q, k, v, heads, mask, 0.0, False)

    @staticmethod
    def symbolic(g, q, k, v, mask, attention_mask, heads):  # noqa: D102
        padding = g.op("Cast", attention_mask, to_i=6)  # int32 [batch, seq], 1 = attend
        # no scale attribute: ONNX Runtime's default, 1/sqrt(head size), as the model's
        out = g.op(f"{MS}::MultiHeadAttention", q, k, v, _omitted(g), padding, num_heads_i=heads)
        out.setType(q.type())
        return out


def linear(x: torch.Tensor, bias: torch.Tensor, given: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """x @ W + bias with W given as (weight_t,) or (int8 weight_t, scale per column)."""
    return _Linear.apply(x, bias, *given)


@contextmanager
def fused_attention(attention_mask: torch.Tensor) -> Iterator[None]:
    """Within the block, trainer/model.py's multi_head_attention (same math in PyTorch) exports
    as MultiHeadAttention reading `attention_mask`. For tracing only: it swaps a module global,
    so nothing else may run the model in this process meanwhile."""
    def attention(q, k, v, heads, mask, dropout_p, training):
        return _Attention.apply(q, k, v, mask, attention_mask, heads)

    model_code.multi_head_attention = attention
    try:
        yield
    finally:
        model_code.multi_head_attention = _reference_attention
