"""The paper reference's accuracy keys from committed results, for a bench run with --no-accuracy.

Models trained elsewhere are scored once and committed; `palkit report --accuracy STUDY
--int8-accuracy FILE` takes `accuracy_avg_pal_int8` and `accuracy_drop_int8_vs_fp32` from FILE
(one PAL model's scores in fp32 and per runtime's int8 bundle) and `accuracy_avg_separate_fp32`
from the study's separate models, on test where both files have it, else dev. Keys the bench
measured stay.
"""
from __future__ import annotations

from pathlib import Path

from palkit.report.frontier import SEPARATE
from palkit.report.ingest import Int8Scores, Study
from palkit.report.model import Measurement, Measurements, Note, NoteKind
from palkit.report.paper_reference import ReferenceSummary

KEYS = ("accuracy_avg_pal_int8", "accuracy_drop_int8_vs_fp32", "accuracy_avg_separate_fp32")
FP32 = "pytorch"


def add_study_accuracy(summary: ReferenceSummary, m: Measurements, study: Study,
                       int8: Int8Scores, pal_runtime: str | None) -> None:
    """Fill the accuracy keys the bench left null, each with the measurement ids it came from."""
    if all(summary.values[k] is not None for k in KEYS):
        return
    separate = study.row(SEPARATE)
    split = ("test" if separate and separate.test_avg and (pal_runtime, "test") in int8.scores
             else "dev")
    separate_avg = (separate.test_avg if split == "test" else separate.dev_avg) if separate \
        else None

    def add(mid: str, value: float | None, machine: str, file: str, what: str) -> str | None:
        if value is None:
            return None
        m.add(mid, Measurement(value, "points", machine, file, what))
        return mid

    pal_what = f"{int8.what}; {split} average"
    int8_stem, study_stem = int8.path.stem, Path(study.path).stem
    int8_id = add(f"study:{int8_stem}:{pal_runtime}:{split}:avg",
                  int8.scores.get((pal_runtime, split)), int8.machine, str(int8.path),  # type: ignore
                  f"int8 on {pal_runtime}: {pal_what}")
    fp32_id = add(f"study:{int8_stem}:{FP32}:{split}:avg", int8.scores.get((FP32, split)),
                  int8.machine, str(int8.path), f"fp32: {pal_what}")
    sep_id = add(f"study:{study_stem}:{SEPARATE}:{split}:avg",
                 separate_avg.mean if separate_avg else None, study.machine, study.path,
                 f"three separate fp32 models, {split} average, mean over "
                 f"{separate_avg.n if separate_avg else None} seed(s)")
    # each key from its ids: one value as it is, or (the drop) the first minus the second
    derived = {"accuracy_avg_pal_int8": [int8_id], "accuracy_avg_separate_fp32": [sep_id],
               "accuracy_drop_int8_vs_fp32": [fp32_id, int8_id]}
    filled = []
    for key, ids in derived.items():
        if summary.values[key] is not None or None in ids:
            continue
        first, *minus = [m.get(i) for i in ids]  # type: ignore[arg-type]
        summary.set(key, first - sum(minus), ids)  # type: ignore[operator,arg-type]
        filled.append(key)
    if filled:  # their "not measured" notes give way to where the values came from
        summary.drop_missing(tuple(filled))
        summary.notes.append(Note(NoteKind.SOURCE, f"{', '.join(filled)}: from {int8.path} and "
                                  f"{study.path}, {split} split (the bench did not score these "
                                  "models)", tuple(filled)))
