"""An assistant's intent and slots on ATIS's test split, every configuration side by side:

    python -m lab.atis_results --joint RUNS/atis --joint-bundle BUNDLES/atis \
        [--joint RUNS/atis-pals --joint-bundle BUNDLES/atis-pals] \
        --separate RUNS/atis-separate --separate-bundles BUNDLES/atis-separate \
        --data-dir ../shared/data --out results/atis

For each configuration (`<mode>/<runtime>/<precision>`: each joint run, named by its mode
(shared, pals), as PyTorch fp32 and its int8 bundle on each runtime; the two separate models
likewise) the test split's
`intent_accuracy` (exact intent set), `slot_f1` (CoNLL span F1) and `sentence_accuracy` (the
whole intent set and every slot right), in points; then each joint model minus the separate
models on each metric with its paired bootstrap interval over utterances (core/stats.py), per
precision and runtime; and JointBERT's published figures, labelled as such. Writes OUT.json and
OUT.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

from palkit.core.host import cpu_model, int8_features
from palkit.core.stats import CONFIDENCE, paired_bootstrap
from palkit.report.published import JOINTBERT_ATIS
from palkit.runtime.labels import span_counts

INTENT, SLOTS = "atis_intent", "atis_slots"
METRICS = ("intent_accuracy", "slot_f1", "sentence_accuracy")
PUBLISHED = {"configuration": JOINTBERT_ATIS.name,
             **{m: JOINTBERT_ATIS.scores[k] for m, k in zip(METRICS, (
                 f"{INTENT}_acc", f"{SLOTS}_f1", f"{INTENT}+{SLOTS}_sentence_acc"))},
             "note": JOINTBERT_ATIS.note}

Named = list[tuple[str, ...]]


def pytorch_predictions(run: Path, data_dir: Path, split: str) -> dict[str, Named]:
    """Each ATIS task's test predictions by the run's model (a --mode separate run: each task's
    own model)."""
    import torch

    from palkit.trainer.checkpoint import load_model, resolve_model_dir, separate_models
    from palkit.trainer.data import encode, read_examples
    from palkit.trainer.evaluate import predict_split

    out: dict[str, Named] = {}
    for folder in separate_models(run) or [run]:
        model, tokenizer, _ = load_model(resolve_model_dir(folder))
        max_len = json.loads((resolve_model_dir(folder) / "summary.json").read_text())["config"]["max_len"]
        for task in set(model.tasks) & {INTENT, SLOTS}:
            spec = model.tasks[task]
            split_data = encode(spec, read_examples(spec, data_dir, split), tokenizer, max_len)
            out[task] = predict_split(model, task, split_data, tokenizer.pad_token_id, 128,
                                      torch.device("cpu"))  # type: ignore[assignment]
    return out


def bundle_predictions(bundles: list[Path], data_dir: Path, split: str,
                       runtime: str) -> dict[str, Named]:
    from palkit.export.evaluate import evaluate_bundle

    out: dict[str, Named] = {}
    for bundle in bundles:
        kept = evaluate_bundle(bundle, data_dir, split, runtime=runtime,
                               keep_predictions=True)["examples"]
        out.update({t: [tuple(p) for p in kept[t]["pred"]] for t in kept if t in (INTENT, SLOTS)})
    return out


def per_utterance(pred: dict[str, Named], gold: dict[str, Named]) -> dict[str, np.ndarray]:
    """What each metric sums per utterance: intent right; slot spans (right, predicted, gold);
    the whole utterance right."""
    intent = np.array([set(p) == set(g) for p, g in zip(pred[INTENT], gold[INTENT])], float)
    counts = [span_counts(g, p) for p, g in zip(pred[SLOTS], gold[SLOTS])]
    spans = np.array([[c.correct, c.predicted, c.gold] for c in counts], float)
    slots = np.array([p == g for p, g in zip(pred[SLOTS], gold[SLOTS])], float)
    return {"intent": intent, "spans": spans, "sentence": intent * slots}


def metric_points(u: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The three metrics (points) of the utterances `rows` ([R, n] -> [R])."""
    s = u["spans"][rows].sum(axis=-2)
    return {"intent_accuracy": 100 * u["intent"][rows].mean(axis=-1),
            "slot_f1": 100 * 2 * s[..., 0] / np.maximum(s[..., 1] + s[..., 2], 1),
            "sentence_accuracy": 100 * u["sentence"][rows].mean(axis=-1)}


def row(name: str, u: dict[str, np.ndarray]) -> dict[str, Any]:
    whole = metric_points(u, np.arange(len(u["intent"]))[None])
    return {"configuration": name, **{m: round(float(whole[m][0]), 2) for m in METRICS}}


def difference(name: str, joint: dict[str, np.ndarray],
               separate: dict[str, np.ndarray]) -> dict[str, Any]:
    n = len(joint["intent"])
    out: dict[str, Any] = {"comparison": name}
    for m in METRICS:
        b = paired_bootstrap(lambda i: metric_points(joint, i)[m] - metric_points(separate, i)[m],
                             [n])
        out[m] = {"difference": round(b.value, 2),
                  "interval": [round(x, 2) for x in b.interval]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--joint", type=Path, action="append", required=True,
                    help="a joint run of intent and slots (repeatable)")
    ap.add_argument("--joint-bundle", type=Path, action="append", required=True,
                    help="its int8 bundle (one per --joint, in order)")
    ap.add_argument("--separate", type=Path, required=True, help="a --mode separate run")
    ap.add_argument("--separate-bundles", type=Path, required=True,
                    help="its int8 export: one bundle per task")
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.md")
    args = ap.parse_args()
    if len(args.joint) != len(args.joint_bundle):
        ap.error("give one --joint-bundle per --joint")

    from palkit.trainer.data import read_examples
    from palkit.trainer.tasks import BUILTIN_TASKS
    gold = {t: [e.label for e in read_examples(BUILTIN_TASKS[t], args.data_dir, args.split)]
            for t in (INTENT, SLOTS)}
    configs = {json.loads((run / "config.json").read_text())["mode"]: (run, bundle)
               for run, bundle in zip(args.joint, args.joint_bundle)}
    separate_bundles = sorted(p for p in args.separate_bundles.iterdir() if p.is_dir())
    sources: dict[str, Any] = {}
    for mode, (run, bundle) in configs.items():
        sources[f"{mode}/pytorch/fp32"] = lambda r=run: pytorch_predictions(r, args.data_dir,
                                                                           args.split)
        for runtime in ("executorch", "onnxruntime"):
            sources[f"{mode}/{runtime}/int8"] = lambda b=bundle, r=runtime: bundle_predictions(
                [b], args.data_dir, args.split, r)
    sources["separate/pytorch/fp32"] = lambda: pytorch_predictions(args.separate, args.data_dir,
                                                                   args.split)
    for runtime in ("executorch", "onnxruntime"):
        sources[f"separate/{runtime}/int8"] = lambda r=runtime: bundle_predictions(
            separate_bundles, args.data_dir, args.split, r)
    units = {name: per_utterance(get(), gold) for name, get in sources.items()}
    rows = [row(name, u) for name, u in units.items()]
    kinds = ("pytorch/fp32", "executorch/int8", "onnxruntime/int8")
    differences = [difference(f"{mode} - separate ({kind})", units[f"{mode}/{kind}"],
                              units[f"separate/{kind}"]) for mode in configs for kind in kinds]
    differences += [difference(f"int8 - fp32 ({mode}, {r})", units[f"{mode}/{r}/int8"],
                               units[f"{mode}/pytorch/fp32"])
                    for mode in configs for r in ("executorch", "onnxruntime")]
    fields = ("preset", "mode", "tasks", "epochs", "steps_per_epoch", "batch_size", "lr",
              "max_len")
    budgets = {mode: {k: json.loads((run / "config.json").read_text()).get(k) for k in fields}
               for mode, (run, _) in configs.items()}
    budgets["separate"] = {k: json.loads((args.separate / "config.json").read_text()).get(k)
                           for k in fields}
    record = {
        "command": "python -m lab.atis_results " + " ".join(
            f"--{k.replace('_', '-')} {w}" for k, v in vars(args).items()
            for w in (v if isinstance(v, list) else [v])),
        "machine": f"{cpu_model()}; int8: {int8_features()}",
        "date": datetime.date.today().isoformat(),
        "split": f"{args.split} ({len(gold[INTENT])} utterances, {args.data_dir}/atis)",
        "budget": budgets, "confidence": CONFIDENCE,
        "configurations": rows, "differences": differences, "published": PUBLISHED}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(record))
    print(markdown(record))


def markdown(r: dict[str, Any]) -> str:
    lines = ["# ATIS: an assistant's intent and slots on one trunk", "",
             f"{r['split']}; {r['machine']}; {r['date']}. Written by `{r['command']}`.", "",
             "| configuration | intent accuracy | slot F1 | sentence accuracy |",
             "|---|---:|---:|---:|"]
    for c in r["configurations"] + [r["published"]]:
        lines.append(f"| {c['configuration']} | {c['intent_accuracy']:.1f} | {c['slot_f1']:.1f} "
                     f"| {c['sentence_accuracy']:.1f} |")
    lines += ["", f"JointBERT's row is published: {r['published']['note']}.", "",
              f"Differences in points with their paired bootstrap {r['confidence']:.0%} "
              "intervals over utterances:", "",
              "| comparison | intent accuracy | slot F1 | sentence accuracy |", "|---|---:|---:|---:|"]
    for d in r["differences"]:
        cells = " | ".join(f"{d[m]['difference']:+.2f} [{d[m]['interval'][0]:+.2f}, "
                           f"{d[m]['interval'][1]:+.2f}]" for m in METRICS)
        lines.append(f"| {d['comparison']} | {cells} |")
    lines += ["", "Budgets (each separate model trains `epochs` x `steps_per_epoch` steps, so "
              "both together train what a joint run does):", ""]
    lines += [f"- {name}: {json.dumps(b)}" for name, b in r["budget"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
