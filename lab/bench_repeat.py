"""Does the verdict repeat? Several `palkit bench` files of the same bundles on one machine, their
paired ratios side by side: each run's calibration (A/A, identical compute), and every ratio of a
later run against the first one's estimate and interval; the headline ratios (those `palkit
report` quotes for the configuration it recommends) are marked.

    python -m lab.bench_repeat BENCH.json... --out results/bench-repeat [--baseline BEFORE.json]

Writes OUT.json, OUT.md and OUT.png (each ratio's estimate and 95% interval, run by run).
`--baseline`: the same bench by the code before paired timing, whose wall time the cost line
compares.
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from palkit.bench.pairs import CALIBRATION_WIDTH, LEVEL_BAND
from palkit.core.fileio import write_json, write_text
from palkit.report.ingest import parse_bench
from palkit.report.model import to_json
from palkit.report.recommend import launch_bundle
from palkit.report.verdict import calibration, pair_label
from palkit.ui.plots import pyplot, save

AGREE = LEVEL_BAND  # a later run's ratio within this of the first's repeats it
HEADLINE = ("identical_compute", "one_task", "all_tasks", "all_vs_one")  # the verdict's ratios


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    # when it ran: its own record, or (files from before it was recorded) its end less its length
    started = data.get("started") or datetime.datetime.fromtimestamp(
        path.stat().st_mtime - (data.get("finished_s") or 0), datetime.timezone.utc
    ).isoformat(timespec="seconds")
    bench = parse_bench(data, str(path))
    timed = {p.id: p for p in bench.pairs if p.ratio is not None}
    pairs = {p["id"]: p for p in data.get("pairs", []) if p["id"] in timed}
    chosen = launch_bundle(bench.subjects)
    return {"file": str(path), "started": started, "wall_s": data.get("finished_s"),
            "timing_plan": data.get("timing_plan"), "machine": bench.machine.label,
            "pairs": pairs, "labels": {i: pair_label(timed[i]) for i in pairs},
            "calibration": [to_json(c) for c in calibration(bench).pairs],
            "headline": [i for i, p in pairs.items() if p["kind"] in HEADLINE
                         and chosen is not None and p["num"]["subject"] == chosen.name]}


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    ids = [i for i in first["pairs"] if all(i in r["pairs"] for r in runs)]
    rows = []
    for i in ids:
        base = first["pairs"][i]
        low, high = base["interval"]
        later = [{"file": r["file"], "ratio": r["pairs"][i]["ratio"],
                  "interval": r["pairs"][i]["interval"],
                  "within_0.03": abs(r["pairs"][i]["ratio"] - base["ratio"]) <= AGREE,
                  "inside_first_interval": low <= r["pairs"][i]["ratio"] <= high}
                 for r in runs[1:]]
        rows.append({"id": i, "kind": base["kind"], "what": first["labels"][i],
                     "headline": i in first["headline"],
                     "first": {"ratio": base["ratio"], "interval": base["interval"]},
                     "later": later})
    checks = [{"file": r["file"], "started": r["started"], "wall_s": r["wall_s"],
               "timing_plan": r["timing_plan"], "pairs": r["calibration"]} for r in runs]
    start = datetime.datetime.fromisoformat(first["started"])
    hours = [(datetime.datetime.fromisoformat(r["started"]) - start).total_seconds() / 3600
             for r in runs]
    return {"machine": first["machine"], "runs": [r["file"] for r in runs],
            "hours_after_first": hours, "ratios": rows, "calibration": checks}


def markdown(result: dict[str, Any], baseline_wall_s: float | None) -> str:
    runs = result["runs"]
    lines = [f"# Does the verdict repeat? {len(runs)} bench runs on one machine", "",
             f"Machine: {result['machine']}. Files: " + ", ".join(f"`{r}`" for r in runs) + ".",
             f"Made by `python -m lab.bench_repeat {' '.join(runs)}"
             + (f" --baseline {result['baseline']}" if result["baseline"] else "")
             + " --out ...`.", "",
             "## Calibration, run by run (true ratio 1.00; noisy outside 1.00 ± "
             f"{LEVEL_BAND:.0%} or wider than ± {CALIBRATION_WIDTH:.0%})", "",
             "| run | started (UTC) | bench wall s | pair | ratio [95%] | |",
             "|---|---|---:|---|---:|---|"]
    for c in result["calibration"]:
        for p in c["pairs"]:
            lines.append(f"| `{Path(c['file']).name}` | {c['started']} | {c['wall_s']:.0f} | "
                         f"{p['what']} | "
                         f"{p['ratio']:.3f} [{p['interval'][0]:.3f}, {p['interval'][1]:.3f}] | "
                         f"{p['problem'] or 'steady'} |")
    if baseline_wall_s:
        walls = [c["wall_s"] for c in result["calibration"] if c["wall_s"]]
        lines += ["", f"Bench wall time: {baseline_wall_s:.0f} s by the code before paired "
                  f"timing (`{result['baseline']}`), {min(walls):.0f}-{max(walls):.0f} s with it: "
                  f"{max(walls) / baseline_wall_s:.2f}x at most."]
    plans = [(c["file"], c["timing_plan"]) for c in result["calibration"] if c["timing_plan"]]
    if plans:  # files of a fixed five processes have none
        lines += ["", "Paired timing's plan (bench/plan.py): " + "; ".join(
            f"`{Path(f).name}` {p['processes']} processes, stopped: {p['stopped']} "
            f"({p['seconds']:.0f} s)" for f, p in plans) + "."]
    hours = result["hours_after_first"]
    lines += ["", "## Every ratio against the first run", "",
              "| ratio | first run [95%] | " + " | ".join(
                  f"`{Path(r).name}` (+{h:.1f} h)" for r, h in zip(runs[1:], hours[1:]))
              + " |", "|---|---:|" + "---:|" * (len(runs) - 1)]
    for row in result["ratios"]:
        f = row["first"]
        cells = [f"{x['ratio']:.3f}" + ("" if x["within_0.03"] and x["inside_first_interval"]
                                        else " (!)") for x in row["later"]]
        what = f"**{row['what']}**" if row["headline"] else row["what"]
        lines.append(f"| {what} | {f['ratio']:.3f} [{f['interval'][0]:.3f}, "
                     f"{f['interval'][1]:.3f}] | " + " | ".join(cells) + " |")
    lines += ["", "Bold: a headline ratio (the recommended configuration's, as `palkit report` "
              "quotes it). (!): more than 0.03 from the first run's ratio, or outside its "
              "interval."]
    for k, h in enumerate(hours[1:]):
        if h >= 1:
            kept = [r["later"][k] for r in result["ratios"] if r["headline"]]
            held = sum(x["within_0.03"] and x["inside_first_interval"] for x in kept)
            lines.append(f"`{Path(runs[k + 1]).name}`, {h:.1f} h after the first: {held} of "
                         f"{len(kept)} headline ratios within 0.03 of the first run's and inside "
                         "its interval.")
    return "\n".join(lines) + "\n"


def draw(result: dict[str, Any], path: Path) -> None:
    """Each run's estimate and interval of every ratio, relative to the first run's estimate: a
    later run inside the first's interval and within 3% of it reads as repeating. Headline
    ratios in bold."""
    plt = pyplot()
    rows = result["ratios"]
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.5 * len(rows)))
    runs = len(result["runs"])
    for y, row in enumerate(rows):
        base = row["first"]["ratio"]
        for k, p in enumerate([row["first"], *row["later"]]):
            low, high = (x / base for x in p["interval"])
            ax.errorbar(p["ratio"] / base, y + (k - (runs - 1) / 2) * 0.12,
                        xerr=[[p["ratio"] / base - low], [high - p["ratio"] / base]], fmt="o",
                        ms=3, capsize=2, color=f"C{k}",
                        label=Path(result["runs"][k]).stem if y == 0 else None)
    ax.axvspan(1 - AGREE, 1 + AGREE, color="0.9", zorder=0)
    ax.set_yticks(range(len(rows)), [r["what"] for r in rows], fontsize=7)
    for label, row in zip(ax.get_yticklabels(), rows):
        label.set_fontweight("bold" if row["headline"] else "normal")
    ax.set_xlabel("each run's ratio and 95% interval / the first run's ratio (grey: ± 3%)")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"Paired ratios, run by run\n{result['machine']}", fontsize=9)
    fig.tight_layout()
    save(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--baseline", type=Path)
    args = p.parse_args()
    result = compare([load(b) for b in args.bench])
    result["baseline"] = str(args.baseline) if args.baseline else None
    result["baseline_wall_s"] = load(args.baseline)["wall_s"] if args.baseline else None
    write_json(args.out.with_suffix(".json"), result)
    write_text(args.out.with_suffix(".md"), markdown(result, result["baseline_wall_s"]))
    draw(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')}, .md and .png")


if __name__ == "__main__":
    main()
