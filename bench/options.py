"""What `palkit bench` measures and how: its options, each default defined once here (the
command's flags read their defaults from these dataclasses; tests/test_cli.py holds them to it),
and where its results go by default. Light: the command line reads it without importing torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from palkit.bench.schema import PEERS
from palkit.runtime.manifest import RUNTIMES

# Default outputs go under runs/reports/ (git-ignored), never over the committed reports/.
DEFAULT_BENCH_OUT = Path("runs/reports/bench-host.json")
DEFAULT_SCALE_OUT = Path("runs/reports/bench-scale.json")


@dataclass(frozen=True)
class LatencyBudget:
    """How long each latency configuration is timed."""
    warmup: int = 5              # untimed runs before timing
    min_runs: int = 30           # timed runs per configuration
    min_seconds: float = 0.5     # time each configuration at least this long
    max_seconds: float = 4.0     # and at most this long
    block: int = 8               # calls of one configuration in a row per round (worker.py)


@dataclass
class BenchOptions:
    """What `palkit bench` measures and how; one field per flag of the command."""
    runtimes: list[str] = field(default_factory=lambda: list(RUNTIMES))
    peers: list[str] = field(default_factory=lambda: list(PEERS))
    threads: list[int] = field(default_factory=lambda: [1, 2])
    seq_lens: list[int] = field(default_factory=lambda: [32, 128])
    timing: LatencyBudget = field(default_factory=LatencyBudget)
    # latency passes over all subjects for the per-subject tables (their figures the medians);
    # the verdict's ratios are paired, each in bench/pairs.py's PROCESSES processes
    rounds: int = 1
    splits: list[str] = field(default_factory=lambda: ["dev", "test"])  # [] = no accuracy
    data_dir: Path | None = None
    max_examples: int | None = None
    ceiling: bool = True         # the machine's matmul ceiling
    native: bool = True          # PAL bundles through the Android app's C++ path too
    work: Path = Path("reports/.bench-work")  # where peers are built and cached
    worker_timeout: float = 600
    trust_key: Path | None = None  # bundles must carry this key's signature
