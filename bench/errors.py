"""The error `palkit bench` raises for what it cannot measure (below subjects.py and peers.py,
which both raise it)."""
from __future__ import annotations

from trainer.errors import PalkitError


class BenchError(PalkitError, ValueError):
    """A bundle or run given to `palkit bench` cannot be benchmarked."""
