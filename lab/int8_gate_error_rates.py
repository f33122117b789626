"""How often the int8 gate (export/gate_stats.py) refuses a bundle with no loss, and passes one
with a planted loss, on random halves and quarters of dev: results/int8-gate-error-rates.json
and .md.

    python -m lab.int8_gate_error_rates --recorded results/int8-gate-3000-steps.json \
        [--bundle BUNDLE --run RUN --data-dir DIR] --out results/int8-gate-error-rates

Two sources:
* --recorded: a study's records (results/int8-gate-3000-steps.json, default_export.gate). For an
  accuracy task the gate's decision depends only on the per-example (fp32 correct, int8
  correct) pairs, and a record holds their whole contingency table (examples, fp32 accuracy,
  flips gained and lost), so a random subset of the table is a random subset of dev: exact
  for accuracy tasks. Pearson tasks (STS-B) need the scores, which no record holds.
* --bundle/--run: a live bundle and its run. Every runtime's and PyTorch fp32's outputs on all
  of dev (as export verifies them), then the same subsets; every task, Pearson included.

A planted loss of L points: on the full split, int8 predictions that were right (and agreed
with fp32) are made wrong, round(L n / 100) of them, chosen at random each trial; for a
Pearson task the int8 scores get Gaussian noise scaled (bisection) to lower Pearson by L points
on the full split. That is a loss of exactly L points whose size we choose, where damaging a
layer gives one we do not. Subsets are drawn after planting, so a half sees about L.
Each (source, runtime, split size, planted loss) runs --trials subsets; a runtime is refused
when any of its tasks is, under the default rule and under --strict-gate.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import torch

from palkit.core.fileio import write_json, write_text
from palkit.core.stats import rowwise_pearson
from palkit.export.gate import Gate
from palkit.export.gate_stats import compare, failure
from palkit.trainer.tasks import BUILTIN_TASKS

FRACTIONS = {"all": 1.0, "half": 0.5, "quarter": 0.25}
PLANTED = (0.0, 1.5, 3.0)
RULES = {"default": Gate(), "strict": Gate(strict=True)}

# one task's outputs on dev: (spec, fp32 outputs, int8 outputs, gold)
Outputs = tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]


def machine() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                if line.startswith("Model name"))
    return f"{name}{', AVX-512 VNNI' if 'avx512_vnni' in out else ''}"


def from_table(record: dict[str, Any]) -> Outputs:
    """Two-class logits (gold 0) with the record's contingency table of correctness."""
    n, name = record["examples"], record["metric"].rsplit("_", 1)[0]
    right = round(record["metrics_pytorch_fp32"][record["metric"]] * n)
    lost, gained = record["flips"]["lost"], record["flips"]["gained"]
    cells = [(True, True)] * (right - lost) + [(True, False)] * lost + \
        [(False, True)] * gained + [(False, False)] * (n - right - gained)
    logit = {True: [2.0, 0.0], False: [0.0, 2.0]}
    ref = torch.tensor([logit[a] for a, _ in cells])
    got = torch.tensor([logit[b] for _, b in cells])
    return BUILTIN_TASKS[name], ref, got, torch.zeros(n)


def recorded(path: Path) -> dict[str, dict[str, Outputs]]:
    out: dict[str, dict[str, Outputs]] = {}
    for where, r in json.loads(path.read_text())["default_export"]["gate"].items():
        runtime, task = where.split("/")
        if "flips" in r:
            out.setdefault(runtime, {})[task] = from_table(r)
    return out


def live(bundle: Path, run: Path, data_dir: Path) -> dict[str, dict[str, Outputs]]:
    """Every runtime's and PyTorch fp32's outputs on all of dev, as export verifies them."""
    from palkit.export.verify import Verifier, run_task
    from palkit.runtime.bundle import read_bundle
    from palkit.runtime.engine import Engine
    from palkit.trainer.checkpoint import load_model, resolve_model_dir

    loaded = read_bundle(bundle)
    tasks = list(loaded.tasks)
    model, tokenizer, _ = load_model(resolve_model_dir(run), tasks)
    v = Verifier(bundle, model, tokenizer, loaded.manifest.tokenizer.max_length, data_dir,
                 True, Gate(), tasks, log=print)
    out: dict[str, dict[str, Outputs]] = {}
    for runtime in loaded.runtimes:
        engine = Engine(loaded, runtime)
        out[runtime] = {}
        for t in tasks:
            got, _ = run_task(engine, t, v.inputs[t][0])
            out[runtime][t] = (model.tasks[t], v.refs[t], got, torch.tensor(v.inputs[t][1]))
            print(f"{runtime}/{t}: {len(got)} examples", flush=True)
    return out


def plant(o: Outputs, points: float, g: torch.Generator) -> Outputs:
    """`o` with a loss of `points` planted in the int8 outputs on the full split."""
    spec, ref, got, gold = o
    if points == 0:
        return o
    got = got.clone()
    if spec.is_regression:
        return spec, ref, noisy(ref[:, 0], got, gold, points, g), gold
    right = ((got.argmax(-1) == gold.long()) & (ref.argmax(-1) == gold.long())).nonzero()[:, 0]
    k = round(points * len(gold) / 100)
    chosen = right[torch.randperm(len(right), generator=g)[:k]]
    got[chosen] = got[chosen].roll(1, dims=-1)  # the argmax moves to another class
    return spec, ref, got, gold


def noisy(ref: torch.Tensor, got: torch.Tensor, gold: torch.Tensor, points: float,
          g: torch.Generator) -> torch.Tensor:
    """int8 scores plus Gaussian noise that lowers Pearson by `points` x 100 on the full split."""
    def pearson(x: torch.Tensor) -> float:
        return 100 * float(rowwise_pearson(x[None], gold[None])[0])

    target = pearson(got[:, 0]) - points
    noise = torch.randn(len(gold), generator=g) * float(ref.std())
    low, high = 0.0, 4.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if pearson(got[:, 0] + mid * noise) > target else (low, mid)
    out = got.clone()
    out[:, 0] += high * noise
    return out


def subset(o: Outputs, fraction: float, g: torch.Generator) -> Outputs:
    spec, ref, got, gold = o
    if fraction == 1.0:
        return o
    keep = torch.randperm(len(gold), generator=g)[:round(fraction * len(gold))]
    return spec, ref[keep], got[keep], gold[keep]


def trials(source: dict[str, dict[str, Outputs]], count: int) -> list[dict[str, Any]]:
    """One row per runtime, split size and planted loss: refusals per rule, and per task the
    mean change, resolution and refusals."""
    rows = []
    for runtime, tasks in source.items():
        for size, fraction in FRACTIONS.items():
            for points in PLANTED:
                runs = 1 if fraction == 1.0 and points == 0 else count
                row = {"runtime": runtime, "split": size, "planted_points": points,
                       "trials": runs, "refused": {rule: 0 for rule in RULES}, "tasks": {}}
                per_task: dict[str, dict[str, list]] = {t: {"change": [], "resolution": [],
                                                            "examples": []} for t in tasks}
                for i in range(runs):
                    g = torch.Generator().manual_seed(1000 * i + int(10 * points))
                    refused = {rule: False for rule in RULES}
                    for t, o in tasks.items():
                        spec, ref, got, gold = subset(plant(o, points, g), fraction, g)
                        r = compare(spec, ref, got, gold.tolist(), "lab")
                        per_task[t]["change"].append(r["metric_change"])
                        per_task[t]["resolution"].append(r["resolution"])
                        per_task[t]["examples"].append(r["examples"])
                        for rule, gate in RULES.items():
                            if failure(r, t, True, gate):
                                refused[rule] = True
                                per_task[t].setdefault(f"refused_{rule}", []).append(i)
                    for rule in RULES:
                        row["refused"][rule] += refused[rule]
                row["tasks"] = {t: {"examples": x["examples"][0],
                                    "mean_change": statistics.fmean(x["change"]),
                                    "mean_resolution": statistics.fmean(x["resolution"]),
                                    **{f"refused_{rule}": len(x.get(f"refused_{rule}", []))
                                       for rule in RULES}} for t, x in per_task.items()}
                rows.append(row)
                print(f"{runtime} {size} planted {points}: {row['refused']} of {runs}",
                      flush=True)
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["# The int8 gate's error rates on random halves and quarters of dev", "",
             "Refused: trials in which the runtime was refused (any task), by the default rule "
             "(the measured change beyond --max-drop 1) and by --strict-gate (the 95% interval "
             "allows a drop beyond it). Planted 0: the bundle as exported (false refusals); "
             "planted 1.5 and 3: a loss of that many points planted on the full split, on top "
             "of the bundle's own change, before the subset is drawn (passes are misses). Resolution: the mean ± points the task's split resolves.", ""]
    for name, source in result["sources"].items():
        lines += [f"## {source['what']}", "", f"{source['machine']}; {source['date']}; commit "
                  f"{source['commit']}. Command: `{source['command']}`.", "", source["note"], "",
                  "| runtime | split | planted | refused, default | refused, strict | "
                  "per task: examples, mean change, resolution, refused default/strict |",
                  "|---|---|---:|---:|---:|---|"]
        for row in source["rows"]:
            tasks = "; ".join(f"{t} {x['examples']}, {x['mean_change']:+.2f}, "
                              f"±{x['mean_resolution']:.2f}, {x['refused_default']}/"
                              f"{x['refused_strict']}" for t, x in row["tasks"].items())
            lines.append(f"| {row['runtime']} | {row['split']} | {row['planted_points']:g} | "
                         f"{row['refused']['default']}/{row['trials']} | "
                         f"{row['refused']['strict']}/{row['trials']} | {tasks} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recorded", type=Path, help="a study's JSON with default_export.gate")
    p.add_argument("--bundle", type=Path, help="a live int8 bundle (needs --run, --data-dir)")
    p.add_argument("--run", type=Path, help="the bundle's run directory")
    p.add_argument("--data-dir", type=Path, help="the dev data")
    p.add_argument("--trials", type=int, default=20, help="subsets per row")
    p.add_argument("--out", type=Path, required=True, help="results stem (.json and .md)")
    a = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    stamp = {"command": "python -m lab.int8_gate_error_rates " + " ".join(sys.argv[1:]), "commit": commit,
             "date": date.today().isoformat(), "machine": machine()}
    sources = {}
    if a.recorded:
        sources["recorded"] = {
            "what": f"Recorded contingency tables: {a.recorded} (accuracy tasks)",
            "note": "Exact for accuracy: the gate's decision depends only on the per-example "
                    "(fp32 correct, int8 correct) pairs, and the record holds their table. "
                    "STS-B (Pearson) is not in it.",
            **stamp, "rows": trials(recorded(a.recorded), a.trials)}
    if a.bundle:
        sources["live"] = {
            "what": f"Live bundle {a.bundle} of run {a.run} (every task)",
            "note": "Outputs of each runtime and of PyTorch fp32 on all of dev, computed now.",
            **stamp, "rows": trials(live(a.bundle, a.run, a.data_dir), a.trials)}
    old = a.out.with_suffix(".json")
    if old.is_file():  # a run with one source keeps the other's rows
        sources = {**json.loads(old.read_text())["sources"], **sources}
    result = {"sources": sources}
    write_json(a.out.with_suffix(".json"), result)
    write_text(a.out.with_suffix(".md"), markdown(result))
    print(f"wrote {a.out}.json and .md")


if __name__ == "__main__":
    main()
