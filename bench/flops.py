"""FLOPs of one PalBert inference (batch 1), counted from the model's shapes.

A FLOP here is one multiply or one add of a matrix product: an [M, K] x [K, N] product costs
2·M·K·N (biases, softmax, LayerNorm, GELU and embedding lookups are counted apart as
`elementwise`, a rough 1 FLOP per element touched, and are left out of `matmul`). The ceiling
fraction in the report uses `matmul` only, the part a GEMM kernel can run at peak.
"""
from __future__ import annotations

from typing import Any


def _mm(m: int, k: int, n: int) -> int:
    return 2 * m * k * n


def layer_flops(hidden: int, intermediate: int, seq: int) -> dict[str, int]:
    """One BERT layer: Q, K, V, O projections, the two attention products, the FFN."""
    proj = 4 * _mm(seq, hidden, hidden)
    attn = 2 * _mm(seq, seq, hidden)            # QK^T over all heads, then probs·V
    ffn = _mm(seq, hidden, intermediate) + _mm(seq, intermediate, hidden)
    # biases, softmax over [heads, S, S] ~ 5 FLOPs each, 2 LayerNorms ~ 8/elt, GELU ~ 8/elt
    elementwise = (4 * seq * hidden + seq * intermediate + seq * hidden
                   + 5 * seq * seq + 16 * seq * hidden + 8 * seq * intermediate + 2 * seq * hidden)
    return {"matmul": proj + attn + ffn, "elementwise": elementwise}


def pal_flops(hidden: int, size: int, seq: int) -> dict[str, int]:
    """One PAL: V^E (h -> d_s), Q/K/V in d_s, the two attention products, V^D (d_s -> h)."""
    enc_dec = _mm(seq, hidden, size) + _mm(seq, size, hidden)
    qkv = 3 * _mm(seq, size, size)
    attn = 2 * _mm(seq, seq, size)
    elementwise = (seq * size * 4 + seq * hidden + 5 * seq * seq + 8 * seq * hidden
                   + seq * hidden)  # biases, softmax, GELU, the add into the layer
    return {"matmul": enc_dec + qkv + attn, "elementwise": elementwise}


def model_flops(bert: dict[str, Any], pal: dict[str, Any] | None, num_outputs: list[int] | int,
                seq: int, all_tasks: bool = False) -> dict[str, int]:
    """FLOPs for one task (num_outputs an int) or every task on one input (a list; as
    PalBert.forward_all does, the layers below the first PAL and that layer's attention and
    feed-forward run once, only its PALs per task)."""
    hidden, inter = int(bert["hidden_size"]), int(bert["intermediate_size"])
    layers = int(bert["num_hidden_layers"])
    outs = num_outputs if isinstance(num_outputs, list) else [num_outputs]
    pal_layers = sorted(pal["layers"]) if pal else []
    # trunk layers computed once for all tasks; the rest run once per task
    shared = (min(pal_layers) + 1 if pal_layers else layers) if all_tasks else 0
    if not all_tasks:
        outs = outs[:1]
    total = {"matmul": 0, "elementwise": 3 * seq * hidden + 8 * seq * hidden}  # embed sum + LN

    def add(part: dict[str, int], times: int = 1) -> None:
        for k in total:
            total[k] += part[k] * times

    one_layer = layer_flops(hidden, inter, seq)
    add(one_layer, shared)
    for n_out in outs:
        add(one_layer, layers - shared)
        if pal:
            add(pal_flops(hidden, int(pal["size"]), seq), len(pal_layers))
        # pooler on [CLS] (dense + tanh) and the head
        add({"matmul": _mm(1, hidden, hidden) + _mm(1, hidden, n_out),
             "elementwise": 2 * hidden + n_out})
    total["total"] = total["matmul"] + total["elementwise"]
    return total
