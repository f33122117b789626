"""`palkit verify-arch`: the int8 check on other CPUs, both runtimes (parsing only; the work is
in export/arch_check.py)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from palkit.core.errors import PalkitError
from palkit.core.options import MEASURE, DataDirOption, TrustKeyOption, comma_words
from palkit.export.gate import Gate
from palkit.runtime.manifest import RUNTIMES

app = typer.Typer()
# Dev examples per task (--max-examples 0: the whole split). 150 take about 8 minutes for the three
# tasks of a MiniLM bundle's ExecuTorch files under qemu on a busy 2-core host (about 1 s an
# example).
DEFAULT_EXAMPLES = 150


@app.command("verify-arch", rich_help_panel=MEASURE, epilog="Example: palkit verify-arch "
             "bundles/shared --run runs/shared --arch aarch64 --cpu cortex-a53")
def verify_arch(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="an int8 (or fp32) bundle")],
    run: Annotated[Path, typer.Option(
        metavar="RUN", help="the run (or model folder) the bundle was exported from: the fp32 "
        "reference")],
    arch: Annotated[Literal["aarch64", "x86_64"], typer.Option(
        help="the instruction set to run on (aarch64: under qemu; needs Debian's cross tools "
        "and `python -m palkit.android_demo.host.native_host fetch --arch aarch64`)")] = "aarch64",
    cpu: Annotated[Optional[str], typer.Option(
        metavar="MODEL", help="the qemu CPU model: cortex-a76 (the default on aarch64: dot "
        "product), cortex-a53 (ARMv8.0, no dot product), neoverse-n1; x86_64: Haswell (AVX2, "
        "no VNNI); x86_64 without --cpu: this host's own CPU, no qemu")] = None,
    runtimes: Annotated[Optional[str], typer.Option(
        metavar="RT[,RT]", help=f"runtimes to check: {', '.join(RUNTIMES)} (ExecuTorch through "
        "the app's native path, ONNX Runtime through palkit's runtime layer); default: every "
        "runtime the bundle has")] = None,
    max_examples: Annotated[int, typer.Option(
        metavar="N", help="per task, a stratified sample of N dev examples (each label, or each "
        "tenth of the scores, keeps its share); 0: the whole dev split. 150 take about 8 "
        "minutes for three MiniLM tasks under qemu on a busy 2-core host")] = DEFAULT_EXAMPLES,
    max_drop: Annotated[float, typer.Option(
        help="export's gate on the phone's kernels: the points of its metric a task may lose "
        "against fp32, judged by export's rule (export/gate_stats.py) on the sample")] =
        Gate.max_drop,
    data_dir: DataDirOption = None,
    write: Annotated[bool, typer.Option(
        help="record the result in the bundle's verify.json under architectures.ARCH")] = True,
    sign_key: Annotated[Optional[Path], typer.Option(
        metavar="KEY", help="a signed bundle: re-sign it with this private key after "
        "verify.json changes (without it a signed bundle is refused, or use --no-write)")] = None,
    out: Annotated[Optional[Path], typer.Option(
        metavar="FILE.json", help="also write the record, with machine and command, to this "
        "JSON file and a Markdown table beside it (.md)")] = None,
    trust_key: TrustKeyOption = None,
) -> None:
    """Run a bundle's tasks on another CPU, on each runtime.

    Per runtime and task: agreement with this host's int8 and the largest logit difference
    from it, agreement with fp32, and the metric change against fp32 with export's
    paired-bootstrap interval and gate; exit status 1 when a task fails the gate. Emulated:
    says nothing about a phone's speed.
    """
    from palkit.core.options import resolve_data_dir
    from palkit.export.arch_check import check_architecture, check_cpu, default_cpu
    from palkit.runtime.signing import resolve_trust_key

    check_signing_options(bundle, write, sign_key)
    cpu = cpu or default_cpu(arch)
    check_cpu(arch, cpu)  # before the data folder or the bundle is read
    chosen = comma_words([runtimes], RUNTIMES, "--runtimes") if runtimes else None
    record = check_architecture(bundle, run, resolve_data_dir(data_dir), arch, cpu,
                                max_examples or None, chosen, Gate(max_drop=max_drop), typer.echo,
                                resolve_trust_key(trust_key))
    show_and_record(bundle, record, write, sign_key, out)
    if not record["passed"]:
        raise typer.Exit(1)


def check_signing_options(bundle: Path, write: bool, sign_key: Path | None) -> None:
    """Refuse, before any work, to write into a signed bundle without a key to re-sign it."""
    from palkit.runtime.signing import SIGNATURE_FILE, check_signing_key

    if write and (bundle / SIGNATURE_FILE).is_file() and sign_key is None:
        raise PalkitError(f"{bundle}: signed (model.sig), and verify.json is a signed file: give "
                          "--sign-key KEY to re-sign it, or --no-write")
    if sign_key is not None:
        check_signing_key(sign_key)


def show_and_record(bundle: Path, record: dict[str, Any], write: bool, sign_key: Path | None,
                    out: Path | None) -> None:
    """Print the record's table and failures; record it in verify.json (re-signing the bundle
    with `sign_key`) and, with `out`, in a JSON file and its Markdown table."""
    from palkit.export.arch_records import architecture_table, record_architecture
    from palkit.runtime.signing import sign_bundle

    table = architecture_table(record)
    typer.echo(table)
    for line in record["failures"]:
        typer.echo(f"fails the gate: {line}", err=True)
    if write:
        typer.echo(f"recorded in {record_architecture(bundle, record)}")
        if sign_key is not None:
            sign_bundle(bundle, sign_key)
            typer.echo(f"re-signed {bundle}")
    if out:
        write_results(out, bundle, record, table)


def write_results(out: Path, bundle: Path, record: dict, table: str) -> None:
    """The record with the command and machine as JSON at `out`, its table as Markdown beside."""
    from palkit.core.fileio import write_json, write_text

    command = "palkit " + shlex.join(sys.argv[1:])
    write_json(out, {"command": command, "bundle": str(bundle), **record})
    write_text(out.with_suffix(".md"), f"# The int8 check on {record['arch']} {record['cpu']} "
               f"({record['cpu_int8']}): {bundle}\n\n`{command}`, {record['date']}, verified on "
               f"{record['verifying_machine']}; qemu {record['qemu']}.\n\n{table}\n")
    typer.echo(f"wrote {out} and {out.with_suffix('.md')}")
