"""The headline's accuracy keys from committed results, for a bench run with --no-accuracy.

Models trained elsewhere are scored once and committed; `palkit report --accuracy STUDY
--int8-accuracy FILE` takes `accuracy_avg_pal_int8` and `accuracy_drop_int8_vs_fp32` from FILE
(rows {"runtime", "split", "avg"} of one PAL model in fp32 and per runtime's int8 bundle) and
`accuracy_avg_separate_fp32` from the study's "separate" row, on test where both files have it,
else dev. Keys the bench measured stay.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from palkit.report.frontier import SEPARATE
from palkit.report.ingest import Measurements, ReportError
from palkit.trainer.checkpoint import read_json

KEYS = ("accuracy_avg_pal_int8", "accuracy_drop_int8_vs_fp32", "accuracy_avg_separate_fp32")
FP32 = "pytorch"


def _int8_rows(path: Path) -> tuple[dict[str, Any], dict[tuple[str, str], float]]:
    data = read_json(path)
    rows: dict[tuple[str, str], float] = {}
    for i, row in enumerate(data.get("rows") or []):
        missing = [k for k in ("runtime", "split", "avg") if k not in row]
        if missing:
            raise ReportError(f"{path}: rows[{i}] lacks {', '.join(missing)}; each row needs "
                              "runtime (pytorch, executorch or onnxruntime), split and avg")
        rows[(row["runtime"], row["split"])] = 100 * row["avg"]
    if not rows:
        raise ReportError(f"{path}: no rows; expected the PAL model's scores per runtime and split")
    return data, rows


def add_study_accuracy(summary: dict[str, Any], sources: dict[str, list[str]], m: Measurements,
                       study_file: Path, int8_file: Path, pal_runtime: str | None) -> None:
    """Fill the accuracy keys the bench left null, each with the measurement ids it came from."""
    if all(summary.get(k) is not None for k in KEYS):
        return
    data, scores = _int8_rows(int8_file)
    study = read_json(study_file)
    separate = {r["name"]: r for r in study["rows"]}.get(SEPARATE) or {}
    split = "test" if separate.get("test_avg") and (pal_runtime, "test") in scores else "dev"
    separate_avg = separate.get(f"{split}_avg") or {}

    def add(mid: str, value: float | None, machine: str, file: Path, what: str) -> str | None:
        m.add(mid, value, "points", machine, str(file), what)
        return mid if value is not None else None

    pal_what = f"{data.get('what', 'the PAL model')}; {split} average"
    int8_id = add(f"study:{int8_file.stem}:{pal_runtime}:{split}:avg",
                  scores.get((pal_runtime, split)), data.get("machine", "?"), int8_file,
                  f"int8 on {pal_runtime}: {pal_what}")
    fp32_id = add(f"study:{int8_file.stem}:{FP32}:{split}:avg", scores.get((FP32, split)),
                  data.get("machine", "?"), int8_file, f"fp32: {pal_what}")
    sep_id = add(f"study:{study_file.stem}:{SEPARATE}:{split}:avg", separate_avg.get("mean"),
                 study.get("machine", "?"), study_file, f"three separate fp32 models, {split} "
                 f"average, mean over {separate_avg.get('n')} seed(s)")
    # each key from its ids: one value as it is, or (the drop) the first minus the second
    derived = {"accuracy_avg_pal_int8": [int8_id], "accuracy_avg_separate_fp32": [sep_id],
               "accuracy_drop_int8_vs_fp32": [fp32_id, int8_id]}
    filled = []
    for key, ids in derived.items():
        if summary.get(key) is not None or None in ids:
            continue
        first, *minus = [m.get(i) for i in ids]
        summary[key] = first - sum(minus)  # type: ignore[operator]
        sources[key] = ids  # type: ignore[assignment]
        filled.append(key)
    if filled:  # their "not measured" notes give way to where the values came from
        stale = tuple(f"{k}:" for k in filled)
        summary["notes"] = [*(n for n in summary["notes"] if not n.startswith(stale)),
                            f"{', '.join(filled)}: from {int8_file} and {study_file}, "
                            f"{split} split (the bench did not score these models)"]
