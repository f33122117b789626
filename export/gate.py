"""What int8 must keep: the gate's options and limits (export/gate_stats.py judges a task by them,
export/verify.py runs them), in a module light enough for the command line to read without
importing torch."""
from __future__ import annotations

from dataclasses import dataclass, field

from palkit.core.stats import RESAMPLES, SEED

# Points of accuracy (Pearson x 100 for regression). At ~1,000 dev examples the paired change's
# 95% interval is about +-0.8 point when 2% of the predictions flip, so the split resolves it;
# the reasoning and the measured error rates: docs/int8-gate.md.
DEFAULT_MAX_DROP = 1.0
MAX_FLOAT_LAYERS = 4       # the fallback's limit: layers kept in float per runtime
FP32_TOLERANCE = 1e-3      # max |bundle - PyTorch| allowed in fp32 outputs (typically ~1e-6)


@dataclass(frozen=True)
class Gate:
    """What int8 must keep. `max_drop`: points of the task metric the measured change may lose
    (None: no metric gate); `strict`: the 95% interval may not allow such a loss either.
    `min_agreement`: also refuse when even the upper end of the agreement's interval is below
    this (None: 0 with dev labels, 0.9 on built-in sentences, where no metric can be scored).
    `max_examples`: dev examples per task (None: all). `keep_float`: Linears each runtime keeps
    in float from the start ({runtime: [module path]}), the fallback adding to them."""
    max_drop: float | None = DEFAULT_MAX_DROP
    strict: bool = False
    min_agreement: float | None = None
    max_examples: int | None = None
    seed: int = SEED
    resamples: int = RESAMPLES
    max_float_layers: int = MAX_FLOAT_LAYERS
    keep_float: dict[str, list[str]] = field(default_factory=dict)
