"""lab/fold_captured.py: a GPU study's rows join results/converged as their own captured rows,
seeds gathered across leases, each with the machine, commit and command it ran with."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from palkit.studies.results import configuration_row


def seed(n: int, dev: float, test: float | None) -> dict:
    metrics = {"sst_acc": dev, "quora_acc": dev, "quora_f1": dev, "sts_pearson": dev,
               "sts_spearman": dev}
    return {"seed": n, "dev": {"avg": dev, **metrics}, "test": {"avg": test} if test else None,
            "dev_curve": [70.0, 100 * dev], "total_steps": 7200, "train_s": 60.0,
            "command": f"palkit train --seed {n}"}


def study_file(path: Path, rows: dict[str, list[dict]]) -> Path:
    path.write_text(json.dumps({"machine": "m", "study": "/tmp/study",
                                "rows": [{"name": k, "per_seed": v} for k, v in rows.items()]}))
    return path


def fold(converged: Path, files: list[Path], commit: str, monkeypatch) -> None:
    from lab.fold_captured import main
    monkeypatch.setattr(sys, "argv", ["fold_captured", *map(str, files), "--machine", "an H100",
                                      "--commit", commit, "--command", f"palkit study ({commit})",
                                      "--converged", str(converged)])
    main()


def test_captured_rows_gather_seeds_across_leases_and_keep_the_eager_rows(tmp_path,
                                                                          monkeypatch):
    stem = tmp_path / "converged"
    eager = configuration_row("separate", [seed(0, 0.743, None)])
    stem.with_suffix(".json").write_text(json.dumps({"machine": "eager box", "rows": [eager]}))
    first = study_file(tmp_path / "a.json", {"pals": [seed(0, 0.746, 0.758)],
                                             "separate": [seed(0, 0.74, 0.76),
                                                          seed(1, 0.744, 0.757)]})
    second = study_file(tmp_path / "b.json", {"pals": [seed(1, 0.742, None), seed(2, 0.740, 0.75)]})
    fold(stem, [first], "aaa111", monkeypatch)
    fold(stem, [second], "bbb222", monkeypatch)
    fold(stem, [second], "bbb222", monkeypatch)    # again: replaces, does not double
    table = json.loads(stem.with_suffix(".json").read_text())
    rows = {r["name"]: r for r in table["rows"]}
    assert list(rows) == ["separate", "pals, captured", "separate, captured"]
    assert rows["separate"] == eager and table["machine"] == "eager box"
    pals = rows["pals, captured"]
    assert pals["captured"] and pals["seeds"] == [0, 1, 2] and pals["test_seeds"] == [0, 2]
    assert pals["dev_avg"] == {"mean": 74.27, "sd": 0.31, "n": 3}
    assert pals["test_avg"] == {"mean": 75.4, "sd": 0.57, "n": 2}
    assert [s["lease"]["commit"] for s in pals["per_seed"]] == ["aaa111", "bbb222", "bbb222"]
    assert [x["source"] for x in pals["leases"]] == ["a.json", "b.json"]
    md = stem.with_suffix(".md").read_text()
    assert "| pals, captured | 3 | 74.3 ± 0.3 |" in md and "| 75.4 ± 0.6 (0,2) |" in md
    assert ("- pals, captured, seed 0: an H100; palkit aaa111; `palkit study (aaa111)` "
            "(a.json)") in md
    assert "- pals, captured, seeds 1,2: an H100; palkit bbb222;" in md
