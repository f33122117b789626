"""What `palkit bench` measures and how: its options, each default defined once here (the
command's flags read their defaults from these dataclasses; tests/test_cli.py holds them to it),
and where its results go by default. Light: the command line reads it without importing torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from palkit.bench.schema import PEERS
from palkit.core.errors import ConfigError
from palkit.runtime.manifest import RUNTIMES

# Default outputs go under runs/reports/ (git-ignored), never over the committed reports/.
DEFAULT_BENCH_OUT = Path("runs/reports/bench-host.json")
DEFAULT_SCALE_OUT = Path("runs/reports/bench-scale.json")


@dataclass(frozen=True)
class LatencyBudget:
    """How long each latency configuration is timed, and the block both kinds of timing share."""
    warmup: int = 5              # untimed runs before timing
    min_runs: int = 30           # timed runs per configuration
    min_seconds: float = 0.5     # time each configuration at least this long
    max_seconds: float = 4.0     # and at most this long
    # Calls of one program in a row before another runs, the first untimed: it refills the
    # caches with that program's weights (worker.py). One value for the per-subject rounds and
    # for each side of a verdict pair: 4 keeps each pair short, so drift within it stays small,
    # and at the default 30 runs costs the tables the calls 8 did (40 per configuration).
    block: int = 4


@dataclass(frozen=True)
class TimingPlan:
    """How many worker processes time the verdict's paired ratios (bench/plan.py): at least
    `min_processes` per runtime; then, while a ratio's interval is wider than bench/pairs.py's
    TARGET_HALFWIDTH, one more process of each runtime timing its unresolved ratios, until
    `max_processes` or `max_seconds` of paired timing beyond the minimum."""
    # one process's layout moves a ratio by up to 5%; with five, one such process moves the
    # between-process t interval by about +-2.5%, within the calibration's +-5%
    min_processes: int = 5
    max_processes: int = 30      # past 30 the t interval narrows only as 1/sqrt(n)
    pairs: int = 6               # pairs of blocks per ratio and process (alternating order)
    # at most about the bench's own length again: some 17 more passes of the full set (17 s each)
    max_seconds: float = 300.0

    def __post_init__(self) -> None:
        # one process has no between-process interval: its ratio would look resolved untested
        if not 2 <= self.min_processes <= self.max_processes:
            raise ConfigError(f"--min-processes {self.min_processes} and --max-processes "
                              f"{self.max_processes}: give 2 <= min <= max")


@dataclass
class BenchOptions:
    """What `palkit bench` measures and how; one field per flag of the command."""
    runtimes: list[str] = field(default_factory=lambda: list(RUNTIMES))
    peers: list[str] = field(default_factory=lambda: list(PEERS))
    threads: list[int] = field(default_factory=lambda: [1, 2])
    seq_lens: list[int] = field(default_factory=lambda: [32, 128])
    timing: LatencyBudget = field(default_factory=LatencyBudget)
    # latency passes over all subjects for the per-subject tables (their figures the medians);
    # the verdict's ratios are paired, in the processes timing_plan decides
    rounds: int = 1
    timing_plan: TimingPlan = field(default_factory=TimingPlan)
    splits: list[str] = field(default_factory=lambda: ["dev", "test"])  # [] = no accuracy
    data_dir: Path | None = None
    max_examples: int | None = None
    ceiling: bool = True         # the machine's matmul ceiling
    native: bool = True          # PAL bundles through the Android app's C++ path too
    work: Path = Path("reports/.bench-work")  # where peers are built and cached
    worker_timeout: float = 600
    trust_key: Path | None = None  # bundles must carry this key's signature
