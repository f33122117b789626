"""Fold a GPU study's rows into results/converged.{json,md} as their own "captured" rows.

    python -m lab.fold_captured STUDY_RESULTS.json [MORE.json ...] --machine TEXT \
        --commit SHA --command TEXT [--converged results/converged]

Each file is what `palkit study-results` wrote on the lent machine. The seeds of one
configuration are gathered across the files (a later file's seed replaces an earlier one's),
re-tabulated as one row named "NAME, captured" (studies/results.configuration_row), and stored
with the machine, commit and command they ran with; rows of that name already in the table are
replaced, so folding a later lease's files again adds to the seeds rather than doubling them.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from palkit.core.fileio import write_json
from palkit.studies.results import configuration_row, markdown_table
from palkit.trainer.checkpoint import read_json

SUFFIX = ", captured"


def captured_rows(files: list[Path], lease: dict[str, str],
                  held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration of `files` and of the captured rows already `held`, each seed
    keeping the lease it ran in (machine, commit, command, file)."""
    seeds: dict[str, dict[int, dict[str, Any]]] = {}
    for row in held:
        if row.get("captured"):
            seeds[row["name"].removesuffix(SUFFIX)] = {s["seed"]: s for s in row["per_seed"]}
    for path in files:
        for row in read_json(path)["rows"]:
            seeds.setdefault(row["name"], {}).update(
                {s["seed"]: {**s, "lease": {**lease, "source": path.name}}
                 for s in row["per_seed"]})
    rows = []
    for name, by_seed in seeds.items():
        row = configuration_row(name + SUFFIX, [by_seed[k] for k in sorted(by_seed)])
        leases = [s["lease"] for s in row["per_seed"]]
        rows.append({**row, "captured": True,
                     "leases": [x for i, x in enumerate(leases) if x not in leases[:i]]})
    return rows


def notes(rows: list[dict[str, Any]]) -> str:
    """Under the table: where the captured rows ran."""
    lines = []
    for row in (r for r in rows if r.get("captured")):
        for lease in row["leases"]:
            seeds = [str(s["seed"]) for s in row["per_seed"] if s["lease"] == lease]
            lines.append(f"- {row['name']}, seed{'s' if len(seeds) > 1 else ''} "
                         f"{','.join(seeds)}: {lease['machine']}; palkit "
                         f"{lease['commit']}; `{lease['command']}` ({lease['source']})")
    if not lines:
        return ""
    return ("\nRows marked captured trained with `cuda_graphs = true` (the step recorded as CUDA "
            "graphs) on a lent GPU, several jobs sharing it, so their train time is not a "
            "speed:\n\n" + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="study-results JSON files")
    parser.add_argument("--machine", required=True, help="the lent machine, in words")
    parser.add_argument("--commit", required=True, help="the palkit commit the study ran")
    parser.add_argument("--command", required=True, help="the study's command")
    parser.add_argument("--converged", type=Path, default=Path("results/converged"),
                        help="STEM of the table to fold into (STEM.json, STEM.md)")
    args = parser.parse_args()
    table = read_json(args.converged.with_suffix(".json"))
    eager = [r for r in table["rows"] if not r.get("captured")]
    lease = {"machine": args.machine, "commit": args.commit, "command": args.command}
    captured = captured_rows(args.files, lease, table["rows"])
    rows = eager + captured
    write_json(args.converged.with_suffix(".json"), {**table, "rows": rows})
    args.converged.with_suffix(".md").write_text(markdown_table(rows) + notes(rows))
    print(f"{len(captured)} captured rows in {args.converged}.json and .md")


if __name__ == "__main__":
    main()
