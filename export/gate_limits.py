"""The int8 gate's default limits (export/verify.py applies them), in a module light enough for
the command line's option definitions to read without importing torch."""
from __future__ import annotations

# Points of accuracy (Pearson x 100 for regression). At ~1,000 dev examples the paired change's
# 95% interval is about +-0.8 point when 2% of the predictions flip, so the split resolves it;
# the reasoning and the measured error rates: docs/int8-gate.md.
DEFAULT_MAX_DROP = 1.0
MAX_FLOAT_LAYERS = 4       # the fallback's limit: layers kept in float per runtime
