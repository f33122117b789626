"""Where int8 hurts: each Linear's signal-to-quantization-noise ratio, replayed in PyTorch with
each runtime's own integer ranges on a few dev examples. It names the layers export's fallback
may keep in float, and the layer table the gate prints."""
from __future__ import annotations

import math
import statistics
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from palkit.export.programs import reference_outputs
from palkit.quant import onnx_int8, xnnpack
from palkit.quant.weights import ProductRanges, is_int8_table, quantize_rows

# The fallback keeps a layer in float only when its SQNR is this far below the median layer's
# (4x the typical quantization noise): below that, no one layer explains a loss.
POINTED_DB = 6.0
SQNR_EXAMPLES = 16         # dev examples per task replayed for the per-layer report



def fake_int8_weight(w: torch.Tensor, ranges: ProductRanges | None = None) -> torch.Tensor:
    """w as the runtimes' weight recipes store it (quant/weights.py: int8 per output row, within
    `ranges`' weights; None: plain [-127, 127])."""
    q, scale = quantize_rows(w, ranges)
    return q.float() * scale[:, None]


def fake_int8_activation(x: torch.Tensor, per_token: bool, symmetric: bool = False,
                         steps: int = 255) -> torch.Tensor:
    """Dynamic 8-bit activations: one range per token (each row of the last dimension) or one
    for the whole tensor; asymmetric (`steps` steps over [min, max] with 0 included: XNNPACK's
    qd8 and ONNX Runtime's DynamicQuantizeLinear at 255, quant/onnx_int8.py's per-token rows at
    its ranges) or symmetric (steps // 2 each side of 0: quant/onnx_int8.py's
    `symmetric_activations`)."""
    dims = (-1,) if per_token else tuple(range(x.dim()))
    if symmetric:
        half = steps // 2
        scale = (x.abs().amax(dim=dims, keepdim=True) / half).clamp(min=1e-30)
        return (x / scale).round().clamp(-half, half) * scale
    low = x.amin(dim=dims, keepdim=True).clamp(max=0)
    high = x.amax(dim=dims, keepdim=True).clamp(min=0)
    scale = ((high - low) / steps).clamp(min=1e-30)
    zero = (-low / scale).round()
    return ((x / scale).round() + zero).clamp(0, 255).sub(zero) * scale


# Both runtimes quantize a Linear the same way (int8 weights per output channel, asymmetric
# per-token activations: XNNPACK's qd8, quant/onnx_int8.py's rows), each within its own integer
# ranges; they differ in whether the tasks' own Linears (PAL, head) are int8: ExecuTorch takes
# task weights as method inputs and runs them in fp32; ONNX Runtime's adapters hold them as int8.
TASK_LAYERS_INT8 = {"executorch": False, "onnxruntime": True}


def product_ranges(runtime: str) -> ProductRanges:
    """The integer ranges `runtime`'s int8 Linears multiply."""
    return {"onnxruntime": onnx_int8.RANGES, "executorch": xnnpack.RANGES}[runtime]


def layer_sqnr(model, tasks: list[str], inputs: dict[str, Any], runtimes: list[str],
               n: int = SQNR_EXAMPLES) -> dict[str, list[dict[str, Any]]]:
    """For each runtime, the SQNR (dB) of every layer it runs in int8 (Linears and the word
    table: `kind`), worst first, over the first n inputs of each task one at a time. Each layer
    is fed the fp32 model's own input, so its figure is its own error, not its inputs'."""
    names = {m: name for name, m in model.named_modules() if isinstance(m, nn.Linear)
             or isinstance(m, nn.Embedding) and is_int8_table(name)}
    replays = {product_ranges(r) for r in runtimes}  # one replay per distinct recipe
    weights = {m: fake_int8_weight(m.weight.detach().float()) for m in names
               if isinstance(m, nn.Embedding)}  # tables: plain rows on both runtimes
    weights.update({(m, ranges): fake_int8_weight(m.weight.detach().float(), ranges)
                    for m in names if isinstance(m, nn.Linear) for ranges in replays})
    sums: dict[tuple[ProductRanges, str], list[float]] = {}

    def int8_output(module: nn.Module, x: torch.Tensor, ranges: ProductRanges) -> torch.Tensor:
        if isinstance(module, nn.Embedding):
            return F.embedding(x, weights[module])
        x = fake_int8_activation(x, per_token=True, steps=ranges.activation_steps)
        return F.linear(x, weights[module, ranges], module.bias)

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        for ranges in replays:
            noise = (out - int8_output(module, args[0], ranges)).double().pow(2).sum()
            s = sums.setdefault((ranges, names[module]), [0.0, 0.0])
            s[0] += float(out.double().pow(2).sum())
            s[1] += float(noise)

    handles = [m.register_forward_hook(hook) for m in names]
    try:
        for t in tasks:
            for ids, mask, types in inputs[t][0][:n]:
                reference_outputs(model, t, ids, mask, types)
    finally:
        for h in handles:
            h.remove()

    kinds = {name: "embedding" if isinstance(m, nn.Embedding) else "linear"
             for m, name in names.items()}

    def table(runtime: str) -> list[dict[str, Any]]:
        ranges = product_ranges(runtime)
        rows = ({"layer": name, "kind": kinds[name],
                 "sqnr_db": round(10 * math.log10(max(s, 1e-30) / max(noise, 1e-30)), 2)}
                for (r, name), (s, noise) in sums.items() if r == ranges
                and (name.startswith("trunk.") or TASK_LAYERS_INT8[runtime]))
        return sorted(rows, key=lambda row: row["sqnr_db"])

    return {r: table(r) for r in runtimes}


def fallback_candidates(runtime: str, layers: list[dict[str, Any]]) -> list[str]:
    """Layers the fallback may keep in float, worst SQNR first: the trunk's (a float Linear runs
    in the same XNNPACK delegate on ExecuTorch; on ONNX Runtime the task matrices are int8
    adapter inputs of the shared graph, one .onnx_adapter per task)."""
    return [r["layer"] for r in layers if r["layer"].startswith("trunk.") and r["kind"] == "linear"]


def pointed_layers(runtime: str, layers: list[dict[str, Any]]) -> list[str]:
    """The fallback candidates the SQNR table points at: POINTED_DB or more below the median of
    the runtime's layers, worst first."""
    if not layers:
        return []
    median = statistics.median(r["sqnr_db"] for r in layers)
    low = {r["layer"] for r in layers if r["sqnr_db"] <= median - POINTED_DB}
    return [c for c in fallback_candidates(runtime, layers) if c in low]


def layer_table(layers: list[dict[str, Any]]) -> str:
    """The eight worst layers."""
    return "\n".join([f"    {'layer':52s} SQNR dB"] +
                     [f"    {r['layer']:52s} {r['sqnr_db']:7.1f}" for r in layers[:8]])
