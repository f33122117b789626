"""`palkit study`: train and score many runs at one budget, side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from palkit.core.errors import PalkitError

app = typer.Typer()
STUDIES = "Studies"


@app.command(rich_help_panel=STUDIES,
             epilog="Example: palkit study studies/converged.toml --out runs/converged "
                    "--parallel 16")
def study(
    study_file: Annotated[Path, typer.Argument(metavar="FILE", help="a study .toml ([base] and "
                                               "[[run]] tables; see studies/converged.toml)")],
    out: Annotated[Path, typer.Option(metavar="DIR", help="where the runs go")],
    parallel: Annotated[int, typer.Option(help="jobs at once (a GPU takes many; a 2-core CPU "
                                          "one)")] = 1,
    threads_per_job: Annotated[Optional[int], typer.Option(
        metavar="N", help="CPU threads per job (default: torch's own choice)")] = None,
    base_model: Annotated[Optional[str], typer.Option(metavar="PATH|ID", help="BERT checkpoint "
                          "for every run (default: the embedded MiniLM)")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(metavar="DIR", help="the task data")] = None,
    device: Annotated[Optional[Literal["auto", "cpu", "cuda"]], typer.Option(
        help="the device every run trains on (default: the study file's, else auto)")] = None,
) -> None:
    """Train every run of a study file (each seed), score each on dev and test, and keep
    DIR/study.json current. Started again, it skips what is done and resumes what stopped."""
    from palkit.core.options import resolve_data_dir
    from palkit.studies.plan import plan_jobs, read_study
    from palkit.studies.run import run_study

    if parallel < 1:
        raise PalkitError("--parallel must be at least 1")
    given = {"base_model": base_model, "device": device}
    machine = {"data_dir": str(resolve_data_dir(data_dir)), **{k: v for k, v in given.items() if v}}
    jobs = plan_jobs(read_study(study_file), out, machine)
    typer.echo(f"{len(jobs)} jobs, {parallel} at a time; status in {out / 'study.json'}")
    if not run_study(jobs, out, parallel, threads_per_job):
        raise PalkitError(f"some jobs failed; see {out / 'study.json'} and their logs")


@app.command(name="study-results", rich_help_panel=STUDIES,
             epilog="Example: palkit study-results runs/converged --out results/converged "
                    "--machine 'NVIDIA H100 80GB'")
def study_results(
    study_dir: Annotated[Path, typer.Argument(metavar="DIR", help="a folder `palkit study` "
                                              "trained")],
    out: Annotated[Path, typer.Option(metavar="STEM", help="writes STEM.json and STEM.md")],
    machine: Annotated[str, typer.Option(help="where the study ran, recorded with the rows")],
) -> None:
    """Tabulate a study: per configuration, dev and test averages as mean ± sd over seeds, the
    dev average after every epoch, optimizer steps and training time."""
    from palkit.core.fileio import write_json
    from palkit.studies.results import markdown_table, study_rows

    if not (study_dir / "study.json").is_file():
        raise PalkitError(f"{study_dir}: no study.json; train it with `palkit study FILE --out "
                          f"{study_dir}`")
    rows = study_rows(study_dir)
    write_json(out.with_suffix(".json"), {"machine": machine, "study": str(study_dir),
                                          "rows": rows})
    out.with_suffix(".md").write_text(markdown_table(rows))
    typer.echo(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
