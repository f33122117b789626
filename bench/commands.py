"""`palkit bench` and `palkit report`: the bench package's commands (parsing only).

The work is in run.py (measuring) and report.py (the report), imported inside each command.
Default outputs go under runs/reports/ (git-ignored), never over the committed reports/.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from bench.schema import PEERS
from export.manifest import RUNTIMES
from trainer.options import DataDirOption, TrustKeyOption

if TYPE_CHECKING:
    from bench.run import LatencyBudget

app = typer.Typer()
MEASURE = "Measure and report"
DEFAULT_BENCH_OUT = Path("runs/reports/bench-host.json")
DEFAULT_SCALE_OUT = Path("runs/reports/bench-scale.json")
DEFAULT_REPORT_OUT = Path("runs/reports/report")
DEFAULT_WORK = Path("reports/.bench-work")
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
    min=1, help="calls of one configuration in a row per round, the first untimed (it brings "
    "the model's weights back into the caches after the others ran)")]
NativeOption = Annotated[bool, typer.Option(
    help="also measure PAL bundles' ExecuTorch files through the Android app's own C++ path (JNI "
    "over Module; needs a C++ compiler and a JDK)")]
ScaleOption = Annotated[Optional[str], typer.Option(
    metavar="T[,T...]", help="instead: export bundles of T synthetic tasks from --run's model and "
    "measure how export, add-task, bytes, memory, swap and latency grow with T (bench/scale.py; "
    "first --threads, last --seq-lens; writes --out and its .md and .png)")]


def _ints(values: list[str]) -> list[int]:
    return [int(v) for item in values for v in item.split(",") if v]


def comma_words(values: list[str], allowed: tuple[str, ...], flag: str) -> list[str]:
    words = [v for item in values for v in item.split(",") if v]
    unknown = [w for w in words if w not in allowed]
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: choose from {', '.join(allowed)}",
                                 param_hint=flag)
    return words


@app.command(rich_help_panel=MEASURE, epilog="Example: palkit bench bundles/default "
             "--run runs/default --threads 1 --seq-lens 128")
def bench(
    bundles: BundlesArgument = None,
    runs: RunsOption = None,
    peers: Annotated[str, typer.Option(
        metavar="PEER[,PEER...]", help=f"peers to build from the separate run: {', '.join(PEERS)} "
        "or none")] = ",".join(PEERS),
    runtimes: Annotated[str, typer.Option(metavar="RT[,RT]", help="bundle runtimes to measure: "
                                          f"{', '.join(RUNTIMES)}")] = ",".join(RUNTIMES),
    threads: Annotated[list[str], typer.Option(metavar="N[,N...]")] = ["1,2"],
    seq_lens: Annotated[list[str], typer.Option(metavar="N[,N...]")] = ["32,128"],
    warmup: Annotated[int, typer.Option(help="untimed runs before timing")] = 5,
    min_runs: Annotated[int, typer.Option(help="timed runs per configuration")] = 30,
    min_seconds: Annotated[float, typer.Option(
        help="time each configuration at least this long")] = 0.5,
    max_seconds: Annotated[float, typer.Option(help="and at most this long")] = 4.0,
    rounds: RoundsOption = 3,
    block: BlockOption = 8,
    accuracy: Annotated[bool, typer.Option(help="score the bundles (as run by their runtime) "
                                           "and the --run models on --splits")] = True,
    splits: Annotated[str, typer.Option(metavar="SPLIT[,SPLIT]")] = "dev,test",
    max_examples: Annotated[Optional[int], typer.Option(
        metavar="N", help="score at most N examples per task and split")] = None,
    data_dir: DataDirOption = None,
    ceiling: Annotated[bool, typer.Option(help="measure the machine's matmul ceiling")] = True,
    native: NativeOption = True,
    work: Annotated[Path, typer.Option(help="where peers are built and cached")] = DEFAULT_WORK,
    out: Annotated[Path, typer.Option(metavar="FILE", help="palkit-bench JSON to write")] =
        DEFAULT_BENCH_OUT,
    trust_key: TrustKeyOption = None,
    scale: ScaleOption = None,
) -> None:
    """Measure bundles, separate models and peers on this machine.

    Size, cold load, adapter swap, resident memory and latency (p50/p90) of exported bundles with
    the runtimes a phone uses (ExecuTorch XNNPACK, ONNX Runtime), each configuration in a fresh
    process; also the peers built from a --mode separate run, the machine's matmul ceiling and the
    accuracy of the exported artifacts. Host CPU figures, never phone figures.
    """
    from bench.run import BenchOptions, LatencyBudget, bench as run_bench
    from trainer.data import resolve_data_dir
    from ui.progress import say

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
    from bench.scale import ScaleOptions, scale

    if not runs:
        raise typer.BadParameter("--scale needs --run RUN (the model whose trunk and task "
                                 "shapes the synthetic tasks take)", param_hint="--scale")
    scale(runs[0], out, ScaleOptions(tasks=tasks, threads=threads, seq_len=seq_len, timing=timing,
                                     work=work / "scale"))
    typer.echo(f"wrote {out} and its .md and .png")


@app.command(rich_help_panel=MEASURE, epilog="Example: palkit report --bench "
             "runs/reports/bench-host.json")
def report(
    bench_files: Annotated[Optional[list[Path]], typer.Option(
        "--bench", metavar="FILE", help=f"host bench JSON (repeatable; default "
        f"{DEFAULT_BENCH_OUT} when no --device-results)")] = None,
    device_results: Annotated[Optional[list[Path]], typer.Option(
        metavar="FILE", help="benchmark JSON exported by the Android app on a phone "
        "(repeatable)")] = None,
    out: Annotated[Path, typer.Option(metavar="DIR", help="report folder")] = DEFAULT_REPORT_OUT,
    summary: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="also write the headline here (e.g. reports/summary.json)")] = None,
    accuracy: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="a study's table (`palkit study-results`, e.g. "
        "results/converged.json): adds the deployment frontier and the recommendation, joined "
        "to bundles named after its configurations")] = None,
    int8_accuracy: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="the PAL model's scores in fp32 and per runtime's int8 bundle (e.g. "
        "results/converged-int8.json), with --accuracy: fills the headline's accuracy keys when "
        "the bench ran with --no-accuracy")] = None,
) -> None:
    """Write report.md, report.json and charts from bench results (host and phone).

    Size, latency, memory and accuracy tables, two charts, and the headline against the targets,
    printed as a table.
    """
    from bench.report import build_report
    from ui.progress import say
    from ui.tables import comparison_table, targets_table

    if not bench_files and not device_results:
        bench_files = [DEFAULT_BENCH_OUT]
    result = build_report(bench_files or [], device_results or [], out, summary, accuracy,
                          int8_accuracy)
    comparison_table(result)
    targets_table(result["targets"], "headline against the targets")
    for note in result["add_task"]["notes"][:1]:  # the recommendation, or what is missing
        typer.echo(note)
    # On the terminal, not only in report.md: each headline row left empty, with its reason,
    # and the bench's own notes (they name the command that fills the gap).
    notes = result["summary"].get("notes") or []
    for key, target in result["targets"].items():
        if target["value"] is None:
            why = next((n.split(": ", 1)[1] for n in notes if n.startswith(f"{key}: ")),
                       "not measured (see report.md)")
            say(f"not measured: {key}: {why}")
    for note in result["host_notes"]:
        say(f"bench note: {note}")
    typer.echo(f"wrote {out / 'report.md'}, {out / 'report.json'} and "
               f"{len(result['charts'])} charts" + (f"; summary {summary}" if summary else ""))
