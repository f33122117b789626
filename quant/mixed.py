"""Mixed precision: Linears that int8 export keeps in float.

A kept layer is marked by its class, `FloatLinear` (an nn.Linear computing the same), so the mark
travels with the model into ExecuTorch's lowering workers and through torch.export (the module
type is in every node's nn_module_stack, where XNNPACKQuantizer's module-type filter reads it),
and ONNX export can list the kept layers' weights (`float_weights`).
"""
from __future__ import annotations

import copy

import numpy as np
from torch import nn


class FloatLinear(nn.Linear):
    """An nn.Linear that int8 export leaves in float."""


def keep_in_float(model: nn.Module, layers: list[str]) -> nn.Module:
    """`model` itself when `layers` is empty, else a copy with those Linears (module paths, as
    named by model.named_modules()) marked FloatLinear."""
    if not layers:
        return model
    kept = copy.deepcopy(model)
    for name in layers:
        module = kept.get_submodule(name)
        if type(module) is not nn.Linear:
            raise ValueError(f"{name} is not an nn.Linear")
        module.__class__ = FloatLinear
    return kept


def float_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """The kept Linears' weights ([out, in], float32), by module path."""
    return {name: m.weight.detach().float().numpy() for name, m in model.named_modules()
            if isinstance(m, FloatLinear)}
