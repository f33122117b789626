"""`palkit bench`: the bench package's command (parsing only).

The work is in run.py (measuring) and scale.py (--scale), imported inside the command. Each
flag's default is BenchOptions' (bench/options.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from palkit.bench.options import (DEFAULT_BENCH_OUT, DEFAULT_SCALE_OUT, BenchOptions,
                                  LatencyBudget, TimingPlan)
from palkit.bench.schema import PEERS
from palkit.core.options import MEASURE, DataDirOption, TrustKeyOption, comma_words
from palkit.runtime.manifest import RUNTIMES

app = typer.Typer()
DEFAULTS = BenchOptions()  # each flag's default, defined once in the dataclass
BundlesArgument = Annotated[Optional[list[Path]], typer.Argument(
    metavar="BUNDLE...", help="bundle folders; single-task bundles are grouped as 'the separate "
    "models'")]
RunsOption = Annotated[Optional[list[Path]], typer.Option(
    "--run", metavar="RUN", help="training run the bundles came from (repeatable): fp32 accuracy, "
    "FLOPs; a --mode separate run also supplies the peers")]
RoundsOption = Annotated[int, typer.Option(
    min=1, help="latency passes over all subjects, each a fresh process per subject; a figure is "
    "the median over them")]
BlockOption = Annotated[int, typer.Option(
    min=1, help="calls of one program in a row, the first untimed (it brings the model's weights "
    "back into the caches after another ran): per latency round, and per side of a verdict pair")]
MinProcessesOption = Annotated[int, typer.Option(
    min=2, help="worker processes per runtime that time the verdict's paired ratios, at least")]
MaxProcessesOption = Annotated[int, typer.Option(
    min=2, help="and at most: more are added while a ratio's 95% interval is wider than ±3%")]
PairsOption = Annotated[int, typer.Option(
    min=1, help="pairs of blocks per verdict ratio and process (the sides in alternating order)")]
MaxPairSecondsOption = Annotated[float, typer.Option(
    min=0, help="paired timing beyond the minimum processes stops before it would pass this")]
PeersOption = Annotated[str, typer.Option(
    metavar="PEER[,PEER...]", help=f"peers to build from the separate run: {', '.join(PEERS)} or "
    "none")]
RuntimesOption = Annotated[str, typer.Option(
    metavar="RT[,RT]", help=f"bundle runtimes to measure: {', '.join(RUNTIMES)}")]
WarmupOption = Annotated[int, typer.Option(help="untimed runs before timing")]
MinRunsOption = Annotated[int, typer.Option(help="timed runs per configuration")]
MinSecondsOption = Annotated[float, typer.Option(help="time each configuration at least this long")]
MaxSecondsOption = Annotated[float, typer.Option(help="and at most this long")]
AccuracyOption = Annotated[bool, typer.Option(
    help="score the bundles (as run by their runtime) and the --run models on --splits")]
MaxExamplesOption = Annotated[Optional[int], typer.Option(
    metavar="N", help="score at most N examples per task and split")]
CeilingOption = Annotated[bool, typer.Option(help="measure the machine's matmul ceiling")]
OutOption = Annotated[Path, typer.Option(metavar="FILE", help="palkit-bench JSON to write")]
NativeOption = Annotated[bool, typer.Option(
    help="also measure PAL bundles' ExecuTorch files through the Android app's own C++ path (JNI "
    "over Module; needs a C++ compiler and a JDK)")]
ScaleOption = Annotated[Optional[str], typer.Option(
    metavar="T[,T...]", help="instead: export bundles of T synthetic tasks from --run's model and "
    "measure how export, add-task, bytes, memory, swap and latency grow with T (bench/scale.py; "
    "first --threads, last --seq-lens; writes --out and its .md and .png)")]


def _ints(values: list[str]) -> list[int]:
    return [int(v) for item in values for v in item.split(",") if v]


def _commas(values: list) -> str:
    return ",".join(map(str, values))


@app.command(rich_help_panel=MEASURE, epilog="Example: palkit bench bundles/default "
             "--run runs/default --threads 1 --seq-lens 128")
def bench(
    bundles: BundlesArgument = None,
    runs: RunsOption = None,
    peers: PeersOption = _commas(DEFAULTS.peers),
    runtimes: RuntimesOption = _commas(DEFAULTS.runtimes),
    threads: Annotated[list[str], typer.Option(metavar="N[,N...]")] = [_commas(DEFAULTS.threads)],
    seq_lens: Annotated[list[str], typer.Option(metavar="N[,N...]")] = [_commas(DEFAULTS.seq_lens)],
    warmup: WarmupOption = DEFAULTS.timing.warmup,
    min_runs: MinRunsOption = DEFAULTS.timing.min_runs,
    min_seconds: MinSecondsOption = DEFAULTS.timing.min_seconds,
    max_seconds: MaxSecondsOption = DEFAULTS.timing.max_seconds,
    rounds: RoundsOption = DEFAULTS.rounds,
    block: BlockOption = DEFAULTS.timing.block,
    min_processes: MinProcessesOption = DEFAULTS.timing_plan.min_processes,
    max_processes: MaxProcessesOption = DEFAULTS.timing_plan.max_processes,
    pairs: PairsOption = DEFAULTS.timing_plan.pairs,
    max_pair_seconds: MaxPairSecondsOption = DEFAULTS.timing_plan.max_seconds,
    accuracy: AccuracyOption = True,
    splits: Annotated[str, typer.Option(metavar="SPLIT[,SPLIT]")] = _commas(DEFAULTS.splits),
    max_examples: MaxExamplesOption = DEFAULTS.max_examples,
    data_dir: DataDirOption = None,
    ceiling: CeilingOption = DEFAULTS.ceiling,
    native: NativeOption = DEFAULTS.native,
    work: Annotated[Path, typer.Option(help="where peers are built and cached")] = DEFAULTS.work,
    out: OutOption = DEFAULT_BENCH_OUT,
    trust_key: TrustKeyOption = DEFAULTS.trust_key,
    scale: ScaleOption = None,
) -> None:
    """Measure bundles, separate models and peers on this machine.

    Size, cold load, adapter swap, resident memory and latency (p50/p90) of exported bundles with
    the runtimes a phone uses (ExecuTorch XNNPACK, ONNX Runtime), each configuration in a fresh
    process; also the peers built from a --mode separate run, the machine's matmul ceiling and the
    accuracy of the exported artifacts. Host CPU figures, never phone figures.
    """
    from palkit.bench.run import bench as run_bench
    from palkit.core.options import resolve_data_dir
    from palkit.ui.progress import say

    timing = LatencyBudget(warmup, min_runs, min_seconds, max_seconds, block)
    if scale:
        _bench_scale(runs, _ints([scale]), _ints(threads)[0], _ints(seq_lens)[-1], timing, work,
                     DEFAULT_SCALE_OUT if out == DEFAULT_BENCH_OUT else out)
        return
    options = BenchOptions(
        runtimes=comma_words([runtimes], RUNTIMES, "--runtimes"),
        peers=[] if peers == "none" else comma_words([peers], PEERS, "--peers"),
        threads=_ints(threads), seq_lens=_ints(seq_lens),
        timing=timing, rounds=rounds,
        timing_plan=TimingPlan(min_processes, max_processes, pairs, max_pair_seconds),
        splits=comma_words([splits], ("dev", "test"), "--splits") if accuracy else [],
        data_dir=resolve_data_dir(data_dir) if accuracy else None,
        max_examples=max_examples, work=work, ceiling=ceiling, native=native,
        trust_key=trust_key)
    data = run_bench(bundles or [], runs or [], out, options)
    for note in data["notes"]:
        say(f"note: {note}")
    typer.echo(f"wrote {out}")


def _bench_scale(runs: list[Path] | None, tasks: list[int], threads: int, seq_len: int,
                 timing: LatencyBudget, work: Path, out: Path) -> None:
    """bench/scale.py on the first --run's model."""
    from palkit.bench.scale import ScaleOptions, scale

    if not runs:
        raise typer.BadParameter("--scale needs --run RUN (the model whose trunk and task "
                                 "shapes the synthetic tasks take)", param_hint="--scale")
    scale(runs[0], out, ScaleOptions(tasks=tasks, threads=threads, seq_len=seq_len, timing=timing,
                                     work=work / "scale"))
    typer.echo(f"wrote {out} and its .md and .png")
