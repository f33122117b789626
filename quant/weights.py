"""What both runtimes' int8 recipes share: which embedding table is int8, and plain per-row
symmetric int8 for small weight matrices (the ONNX adapter tensors)."""
from __future__ import annotations

from dataclasses import dataclass

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


INT16_MAX = 32767


@dataclass(frozen=True)
class ProductRanges:
    """The integers each uint8 x int8 product multiplies: activations 0..`activation_steps` (one
    more where a row's zero point rounds up: per_token), weights -`weight_max`..`weight_max`
    and, when `weight_pair_max` is set, |w[2j]| + |w[2j+1]| <= weight_pair_max for every two
    neighbouring inputs of an output.

    x86 without VNNI (AVX2's and AVX-512's vpmaddubsw, which ONNX Runtime's U8S8 kernels use
    there) adds each pair of neighbouring products in 16 bits, saturating at INT16_MAX:
    full-range operands (255 x 127 + 255 x 127 = 64,770) come out wrong on those CPUs and right
    on VNNI ones. Ranges whose `largest_pair_product` fits give the exact integer product on
    every CPU."""
    activation_steps: int
    weight_max: int
    weight_pair_max: int | None = None

    @property
    def largest_pair_product(self) -> int:
        """The largest |a1 w1 + a2 w2| two neighbouring products can reach."""
        weights = 2 * self.weight_max if self.weight_pair_max is None else self.weight_pair_max
        return min(self.activation_steps + 1, 255) * weights

    @property
    def exact_without_vnni(self) -> bool:
        return self.largest_pair_product <= INT16_MAX


PLAIN = ProductRanges(activation_steps=255, weight_max=127)  # full 8 bits: exact with VNNI only


def quantize_rows(w: torch.Tensor,
                  ranges: ProductRanges | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] float -> (int8 [out, in], float32 scale [out]); w ≈ q * scale[:, None]. Within
    `ranges`' weights (None: plain [-127, 127]): |q| <= weight_max and, with a weight_pair_max,
    |q[2j]| + |q[2j+1]| <= weight_pair_max along each row (the neighbouring inputs x86 without
    VNNI multiplies as a pair), by a coarser scale for the rows whose largest pair needs it. An
    all-zero row (a task's absent PAL in a hybrid ONNX graph) is q = 0 with a tiny finite scale,
    never 0/0."""
    ranges = ranges or PLAIN
    w = w.detach().float()
    scale = w.abs().amax(dim=1) / ranges.weight_max
    if ranges.weight_pair_max is not None:
        a = torch.nn.functional.pad(w.abs(), (0, w.shape[1] % 2))
        pair = (a[:, 0::2] + a[:, 1::2]).amax(dim=1)
        # the two roundings add at most 1 together
        scale = torch.maximum(scale, pair / (ranges.weight_pair_max - 1))
    scale = scale.clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-ranges.weight_max, ranges.weight_max)
    return q.to(torch.int8), scale
