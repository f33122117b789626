"""Plain per-row symmetric int8 for small weight matrices (the ONNX adapter tensors)."""
from __future__ import annotations

import torch


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float -> (int8 [out, in], float32 scale [out]); w ≈ q * scale[:, None]. An
    all-zero row (a task's absent PAL in a hybrid ONNX graph) is q = 0 with a tiny finite scale,
    never 0/0."""
    w = w.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale

