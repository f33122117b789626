"""`palkit export`, `predict`, `demo`, `evaluate`, `results`, `verify`, `keygen`: the export
package's commands (parsing only).

The work is in bundle.py (export) and runtime.py (running a bundle), imported inside each command.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from palkit.core.errors import PalkitError
from palkit.core.options import SCORING, DataDirOption, TrustKeyOption
from palkit.export.gate import MAX_FLOAT_LAYERS, Gate
from palkit.export.options import QUANTS, TARGETS, ExportOptions
from palkit.runtime.manifest import RUNTIMES

if TYPE_CHECKING:
    from palkit.runtime.bundle import Bundle
    from palkit.runtime.engine import Engine

app = typer.Typer()
EXPORT, RUN, TRUST = "Export", "Run a bundle", "Trust"
DEFAULTS = ExportOptions()  # each flag's default, defined once in the dataclass


def _data_dir(value: str | None) -> Path | None:
    """Dev data for verification; None (built-in sentences) when no folder is configured."""
    from palkit.core.errors import DataError
    from palkit.core.options import resolve_data_dir
    try:
        return resolve_data_dir(value)
    except DataError:
        if value:
            raise
        return None


def _comma_list(values: list[str] | None) -> list[str] | None:
    return [v for item in values for v in item.split(",") if v] if values else None


RuntimeOption = Annotated[Optional[Literal[RUNTIMES]], typer.Option(  # type: ignore[valid-type]
    help="which runtime runs the bundle (default: its first; executorch when present)")]
ThreadsOption = Annotated[int, typer.Option(help="CPU threads the runtime may use")]
# The int8 gate's options (export and export --adapter), defined once.
MaxDropOption = Annotated[float, typer.Option(
    help="int8: refuse when a task's measured metric change (accuracy, or Pearson x 100, over the "
    "whole dev split) is a drop of more than this many points; a split too small to resolve it "
    "is named in one line with the resolution it has (docs/int8-gate.md). Layers are kept in "
    f"float (up to {MAX_FLOAT_LAYERS}) only for a loss the split resolves and the per-layer SQNR "
    "points at")]
StrictGateOption = Annotated[bool, typer.Option(
    help="int8: refuse whenever the 95% interval of the change allows a drop beyond --max-drop: "
    "on a small dev split this refuses any int8 model that loses a single example")]
MinAgreementOption = Annotated[Optional[float], typer.Option(
    help="int8: also refuse when even the upper end of the 95% interval of the agreement with "
    "PyTorch fp32 predictions is below this (default: off with dev labels, where --max-drop "
    "judges; 0.9 on built-in sentences)")]


@app.command(rich_help_panel=EXPORT, epilog="Example: palkit export runs/default --target "
             "android --out bundles/default")
def export(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="a run directory or model "
                                            "folder (a --mode separate run: a bundle per model)")],
    target: Annotated[Literal[TARGETS], typer.Option(  # type: ignore[valid-type]
        help="android: ExecuTorch + ONNX Runtime files; or one runtime")] = DEFAULTS.target,
    quant: Annotated[Literal[QUANTS], typer.Option()] = DEFAULTS.quant,  # type: ignore[valid-type]
    tasks: Annotated[Optional[list[str]], typer.Option(
        metavar="NAME[,NAME...]", help="export only these tasks (default: all)")] = DEFAULTS.tasks,
    max_len: Annotated[Optional[int], typer.Option(
        help="max tokens per input (default 128)")] = DEFAULTS.max_len,
    onnx: Annotated[bool, typer.Option(
        help="with --target android, also write the ONNX Runtime files")] = DEFAULTS.onnx,
    out: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="bundle folder (default: in bundles/, the run folder's name, a "
        "dash and --quant, e.g. bundles/default-int8)")] = None,
    overwrite: Annotated[bool, typer.Option(
        help="replace an existing bundle folder at --out")] = DEFAULTS.overwrite,
    adapter: Annotated[Optional[str], typer.Option(
        metavar="TASK", help="add (or with --replace, rewrite) only this task in the existing "
        "bundle --out; its trunk files stay untouched")] = None,
    replace: Annotated[bool, typer.Option(help="with --adapter: overwrite a task")] = False,
    data_dir: DataDirOption = None,
    all_tasks: Annotated[bool, typer.Option(
        help="several tasks: also write the all-tasks program (ExecuTorch all_tasks.pte, ONNX "
        "all_tasks.onnx: every task on one input in one call, the trunk run once; about a "
        "minute more of export)")] = DEFAULTS.all_tasks,
    max_drop: MaxDropOption = DEFAULTS.gate.max_drop,
    strict_gate: StrictGateOption = DEFAULTS.gate.strict,
    min_agreement: MinAgreementOption = DEFAULTS.gate.min_agreement,
    sign_key: Annotated[Optional[Path], typer.Option(
        metavar="KEY", help="sign the bundle (model.sig, OpenSSF Model Signing) with this "
        "ECDSA P-256 private key (PEM); with --adapter, re-sign it")] = DEFAULTS.sign_key,
) -> None:
    """Quantize and export a run to a verified bundle (ExecuTorch and/or ONNX Runtime).

    The bundle (see runtime/BUNDLE.md) holds one shared trunk file per runtime plus one small file
    per task, verified against PyTorch before it is published.
    """
    from palkit.export.bundle import add_adapter, export_run
    from palkit.ui.progress import say

    data = _data_dir(data_dir)
    gate = Gate(max_drop=max_drop, strict=strict_gate, min_agreement=min_agreement)
    if data is None:
        say("note: no data directory found; verifying on built-in sentences")
    if adapter:
        if not out:
            raise PalkitError("--adapter needs --out EXISTING_BUNDLE")
        add_adapter(run_dir, adapter, out, replace, data, gate, sign_key=sign_key)
        return
    out = out or Path("bundles") / f"{run_dir.resolve().name}-{quant}"
    options = ExportOptions(target=target, quant=quant, tasks=_comma_list(tasks), max_len=max_len,
                            onnx=onnx, data_dir=data, gate=gate, all_tasks=all_tasks,
                            overwrite=overwrite, sign_key=sign_key)
    for path in export_run(run_dir, out, options):
        typer.echo(f"bundle: {path}")
        summarize(path)


def summarize(path: Path) -> None:
    """The bundle's files and its verification, as written to manifest.json / verify.json."""
    from palkit.runtime.manifest import VERIFY_FILE, read_manifest

    manifest = read_manifest(path)
    for rel, f in sorted(manifest.files.items()):
        typer.echo(f"  {rel:36s} {f.bytes / 1024:10.1f} KiB")
    verified = json.loads((path / VERIFY_FILE).read_text())
    for rt, r in verified["runtimes"].items():
        for part, checked in (("", r["tasks"]), ("all tasks on one input/", r.get(
                "all_tasks_program", {}).get("tasks", {}))):
            for t, x in checked.items():
                typer.echo(f"  verify {rt}/{part}{t}: {verified_change(x)} ({x['source']})")


def verified_change(checked: dict) -> str:
    """What the gate judged for one task: its metric's change with the 95% interval where dev
    labels were scored, else agreement with PyTorch fp32 and the largest output difference."""
    agreement = f"agreement {checked['agreement']:.3f}"
    if "metric_change" not in checked:
        return f"{agreement}, max |diff| {checked['max_abs_diff']:.2e}"
    low, high = checked["metric_change_interval"]
    resolves = f", resolves ±{checked['resolution']:.2f}" if "resolution" in checked else ""
    return (f"{checked['metric']} {checked['metric_change']:+.2f} points "
            f"[{low:+.2f}, {high:+.2f}]{resolves}, {agreement}")


def _open_bundle(folder: Path, runtime: str | None, tasks: list[str] | None,
                 trust_key: Path | None) -> tuple["Bundle", float]:
    """Check the bundle (signature when a key is trusted, manifest, the files of `runtime` and
    `tasks`) without importing any runtime; returns it and the milliseconds it took."""
    from palkit.runtime.bundle import load_bundle

    t0 = time.perf_counter()
    loaded = load_bundle(folder, runtime=runtime, tasks=tasks, trust_key=trust_key)
    return loaded, (time.perf_counter() - t0) * 1000


def _start_engine(loaded: "Bundle", runtime: str | None,
                  threads: int) -> tuple["Engine", float, float]:
    """Import the runtime as its runner would (runtime/runners.py), timed apart so that "loaded
    in" is loading, then load the bundle's trunk on it: (engine, load ms, import ms)."""
    from palkit.core.quiet import native_stderr_filtered
    from palkit.runtime.engine import Engine
    from palkit.runtime.runners import import_runtime

    runtime = runtime or loaded.runtimes[0]
    t0 = time.perf_counter()
    with native_stderr_filtered():  # the thread pool's start-up lines
        import_runtime(runtime)
    import_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    engine = Engine(loaded, runtime, threads)
    return engine, (time.perf_counter() - t0) * 1000, import_ms


@app.command(rich_help_panel=RUN, epilog='Example: palkit predict bundles/default --all '
             '"How do I learn Python?" "What is the best way to learn Python?"')
def predict(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE")],
    texts: Annotated[list[str], typer.Argument(metavar="TEXT...",
                                               help="one text, or two for pair tasks")],
    task: Annotated[Optional[str], typer.Option(help="the task to run")] = None,
    all_: Annotated[bool, typer.Option("--all", help="run every task that reads the input: "
                                       "single-text tasks on one text, pair tasks on two")] = False,
    runtime: RuntimeOption = None,
    threads: ThreadsOption = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    trust_key: TrustKeyOption = None,
) -> None:
    """Classify text with a bundle: one task, or every task (--all).

    Every input is checked before a runtime is imported; "loaded in" is the time to check and
    load the bundle, the runtime's import shown apart.
    """
    from palkit.runtime.inputs import InputError, check_task_reads, check_texts, needs, tasks_for
    from palkit.ui.tables import predictions_table

    if (task is None) == (not all_):
        raise InputError("give exactly one of --task NAME and --all")
    given = check_texts(texts)
    loaded, check_ms = _open_bundle(bundle, runtime, None if all_ else [task], trust_key)
    if all_:
        chosen, skipped = tasks_for(loaded.tasks.values(), given)
        if not chosen:
            raise InputError(f"{bundle}: no task reads {given.count} text(s) (tasks: "
                             f"{', '.join(f'{t.name} needs {needs(t)}' for t in skipped)})")
    else:
        chosen, skipped = [loaded.task(task)], []
        check_task_reads(chosen[0], given)
    engine, load_ms, import_ms = _start_engine(loaded, runtime, threads)
    t0 = time.perf_counter()
    engine.ready([t.name for t in chosen])  # loaded here: the latency column is running only
    load_ms += check_ms + (time.perf_counter() - t0) * 1000
    preds = (engine.predict_all(given) if all_ else
             [engine.predict(chosen[0].name, given.first, given.second)])
    read = "text 1 + text 2" if given.second is not None else "text 1"
    if as_json:
        typer.echo(json.dumps({
            "runtime": engine.runtime, "load_ms": load_ms, "import_ms": import_ms,
            "predictions": [{**p.to_dict(), "read": read} for p in preds],
            "skipped": [{"task": t.name, "needs": needs(t)} for t in skipped]}, indent=2))
        return
    rows = [{"task": p.task, "read": read, "prediction": p.summary().split(": ", 1)[1],
             "latency": f"{p.latency_ms:.1f} ms ({p.tokens} tokens)"} for p in preds]
    rows += [{"task": t.name, "read": "–", "prediction": f"skipped: needs {needs(t)}",
              "latency": ""} for t in skipped]
    predictions_table(rows, f"{engine.runtime}; bundle loaded in {load_ms:.0f} ms (importing "
                      f"{engine.runtime} took {import_ms:.0f} ms more)")


@app.command(rich_help_panel=RUN, epilog="Example: palkit demo bundles/default")
def demo(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE")],
    runtime: RuntimeOption = None,
    threads: ThreadsOption = 1,
    trust_key: TrustKeyOption = None,
) -> None:
    """Interactive demo: type text, see every task's result.

    A line is one text, or two texts separated by '|||' for pair tasks: one text runs the
    single-text tasks, two the pair tasks. ':task NAME' runs only that task, ':all' every task,
    ':quit' ends. Line editing and history on a terminal.
    """
    from palkit.export.demo import run_demo

    loaded, check_ms = _open_bundle(bundle, runtime, None, trust_key)
    engine, load_ms, import_ms = _start_engine(loaded, runtime, threads)
    run_demo(engine, load_ms + check_ms, import_ms)


@app.command(rich_help_panel=SCORING,
             epilog="Example: palkit evaluate runs/default --split test")
def evaluate(
    target: Annotated[Path, typer.Argument(metavar="RUN_OR_BUNDLE", help="a run directory, a "
                                           "model folder (RUN/model) or a bundle folder")],
    split: Annotated[Literal["dev", "test"], typer.Option()] = "dev",
    data_dir: DataDirOption = None,
    max_len: Annotated[Optional[int], typer.Option(help="default: the run's own max length")] = None,
    max_examples: Annotated[Optional[int], typer.Option(
        metavar="N", help="score at most N examples per task")] = None,
    runtime: RuntimeOption = None,
    out: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="also write the metrics (fractions) as JSON here")] = None,
    trust_key: TrustKeyOption = None,
) -> None:
    """Score a run, a model folder or an exported bundle on a split, in points.

    Per task: accuracy / F1 / Pearson / Spearman, and the average (mean of the accuracies and
    (Pearson+1)/2).
    """
    from palkit.core.options import resolve_data_dir
    from palkit.export.evaluate import score_target
    from palkit.trainer.checkpoint import write_json
    from palkit.ui.tables import metrics_table

    if not target.exists():
        raise PalkitError(f"{target}: not found; give a run directory, a model folder or a bundle")
    result = score_target(target, resolve_data_dir(data_dir), split, max_len, max_examples, runtime,
                          trust_key)
    metrics_table(result, f"{target} · {split}" + (f" · {runtime}" if runtime else ""))
    if out:
        write_json(out, result)
        typer.echo(f"wrote {out}")


@app.command(rich_help_panel=SCORING, epilog="Example: palkit results runs/pals-top "
             "--name pals-top-half")
def results(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="a finished run directory")],
    name: Annotated[str, typer.Option(help="the row's name, e.g. 'pals-annealed'")],
    as_out: Annotated[Optional[str], typer.Option(
        help="the --out to quote in the recorded command (default RUN)")] = None,
    data_dir: DataDirOption = None,
    results_file: Annotated[Path, typer.Option("--results", help="JSON file to update (the "
                            "committed record: results/accuracy.json)")] =
        Path("runs/results/accuracy.json"),
    bundle: Annotated[Optional[Path], typer.Option(
        help="an exported bundle holding this run's (single) task: record its adapter blob's "
             "bytes per runtime as adapter_bytes")] = None,
) -> None:
    """Score a finished run on dev and test into a results table (JSON and its Markdown)."""
    from palkit.core.options import resolve_data_dir
    from palkit.runtime.manifest import read_manifest
    from palkit.trainer.results import canonical_command, record, run_facts
    from palkit.trainer.scoring import score_run
    from palkit.trainer.tasks import resolve_tasks

    folder = resolve_data_dir(data_dir)
    facts = run_facts(run_dir)
    command = canonical_command(facts["config"], as_out or str(run_dir))
    extra = {}
    if bundle:
        (task,) = facts["config"]["tasks"]
        extra["adapter_bytes"] = read_manifest(bundle).task_bytes(task)
    tasks = resolve_tasks(facts["config"]["tasks"], facts["config"].get("custom_tasks"))
    for split in ("dev", "test"):
        if not any(split in t.files for t in tasks):
            continue  # e.g. cfimdb has no labelled test split
        metrics = score_run(run_dir, folder, split, None, None)
        record(results_file, name, facts, split, metrics, command, extra)
        typer.echo(f"{name} {split}: avg={metrics['avg'] * 100:.1f}")
    typer.echo(f"updated {results_file} and {results_file.with_suffix('.md')}")


@app.command(rich_help_panel=TRUST, epilog="Example: palkit verify bundles/default --trust-key "
             "keys/palkit.pub.pem")
def verify(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE")],
    trust_key: TrustKeyOption = None,
) -> None:
    """Check a bundle's signature and every file in it against a trusted public key.

    Refuses an unsigned bundle, one signed by another key, an edited manifest, and any file
    added, removed or changed after signing, with one line naming the file.
    """
    from palkit.runtime.signing import SIGNATURE_FILE, resolve_trust_key, verify_bundle_signature

    key = resolve_trust_key(trust_key)
    if key is None:
        raise PalkitError("give --trust-key PUB (or set $PALKIT_TRUST_KEY) to verify against")
    verify_bundle_signature(bundle, key, check_files=True)
    files = sum(1 for p in bundle.rglob("*") if p.is_file() and p.name != SIGNATURE_FILE)
    typer.echo(f"ok: {bundle} is signed by {key}; all {files} files match the signature")


@app.command(rich_help_panel=TRUST, epilog="Example: palkit keygen keys")
def keygen(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="where to write the key pair")],
    name: Annotated[str, typer.Option(help="file name stem")] = "palkit",
) -> None:
    """Make an ECDSA P-256 key pair for signing bundles (NAME.key.pem private, NAME.pub.pem)."""
    from palkit.runtime.signing import generate_keypair

    folder.mkdir(parents=True, exist_ok=True)
    for existing in (folder / f"{name}.key.pem", folder / f"{name}.pub.pem"):
        if existing.exists():
            raise PalkitError(f"{existing} exists; pick another --name or folder")
    private, public = generate_keypair(folder, name)
    typer.echo(f"private key {private} (keep it secret: it signs bundles)\npublic key  {public} "
               "(ship it in the app as assets/trusted_key.pem; verify with --trust-key)")
