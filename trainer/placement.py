"""Which trunk layers get a PAL: the `--pal-layers` spellings and the layer indices they mean.

Pure Python (no torch), so the config can check a spelling before any model is loaded; the
indices themselves need the trunk's depth and are resolved when the model is built.
"""
from __future__ import annotations

import re

from palkit.core.errors import ConfigError

NAMED = ("all", "top", "bottom")
HELP = ("all, the top or bottom half, top-N (the top N layers) or explicit layer indices "
        "counted from 0 (e.g. 3,4,5); the layers below the first adapted one are identical for "
        "every task and run once when all tasks run on one input")
_TOP_N = re.compile(r"top-(\d+)")
_INDICES = re.compile(r"\d+(,\d+)*")


def check_placement(which: str) -> None:
    """Refuse a spelling that no trunk could mean (ValueError naming the option)."""
    if not (which in NAMED or _TOP_N.fullmatch(which) or _INDICES.fullmatch(which)):
        raise ConfigError(f"pal_layers must be all, top, bottom, top-N or layer indices like "
                          f"3,4,5; got '{which}'")
    if _TOP_N.fullmatch(which) and int(which[4:]) < 1:
        raise ConfigError("pal_layers top-N needs N >= 1")


def pal_layer_indices(num_layers: int, which: str) -> tuple[int, ...]:
    """The adapted layers, ascending, for a trunk of `num_layers` layers."""
    check_placement(which)
    half = num_layers // 2
    if which in NAMED:
        chosen = {"all": range(num_layers), "top": range(half, num_layers),
                  "bottom": range(half)}[which]
    elif which.startswith("top-"):
        n = int(which[4:])
        if n > num_layers:
            raise ConfigError(f"pal_layers {which}: the trunk has only {num_layers} layers")
        chosen = range(num_layers - n, num_layers)
    else:
        chosen = sorted({int(i) for i in which.split(",")})
        if chosen[-1] >= num_layers:
            raise ConfigError(f"pal_layers {which}: layer {chosen[-1]} does not exist (the trunk "
                             f"has layers 0-{num_layers - 1})")
    return tuple(chosen)


def placement_name(layers: list[int] | tuple[int, ...], num_layers: int) -> str:
    """The shortest spelling of a placement: all / top / bottom / top-N, else the indices."""
    layers = sorted(layers)
    for which in NAMED:
        if layers == list(pal_layer_indices(num_layers, which)):
            return which
    if layers and layers == list(range(num_layers - len(layers), num_layers)):
        return f"top-{len(layers)}"
    return ",".join(map(str, layers))
