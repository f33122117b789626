"""What both runtimes' int8 recipes share: which embedding table is int8, and plain per-row
symmetric int8 for small weight matrices (the ONNX adapter tensors)."""
from __future__ import annotations

import torch

# Only the word table (module path suffix) is int8, per row. The position and token-type tables
# stay fp32: their rows are added to every input (a token-type row to every token), so their
# int8 rounding is the same offset on every input, not noise that averages out. MiniLM's
# token-type table quantizes at 29 dB (one channel 15x the row's RMS; the word table: 43 dB),
# and on a 3,000-step model keeping both fp32 cut ONNX Runtime's KL(fp32 || int8) on SST-5 by
# a quarter, for 0.6 MB (docs/int8-gate.md).
INT8_TABLE = "embeddings.word_embeddings"


def is_int8_table(name: str) -> bool:
    """Whether the embedding table of module path (or parameter name) `name` is int8."""
    return name.removesuffix(".weight").endswith(INT8_TABLE)


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float -> (int8 [out, in], float32 scale [out]); w ≈ q * scale[:, None]. An
    all-zero row (a task's absent PAL in a hybrid ONNX graph) is q = 0 with a tiny finite scale,
    never 0/0."""
    w = w.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale

