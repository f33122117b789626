"""The int8 gate's statistics: a task's change against PyTorch fp32 on paired examples, its
paired-bootstrap 95% interval (core/stats.py), the smallest change the split resolves, and the
verdict (the rule and its measured error rates: docs/int8-gate.md). The bootstrap's seed is
fixed, so the same outputs always get the same verdict. Outputs arrive as tensors and leave
torch here: the bootstrap runs in numpy."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from palkit.core.stats import paired_bootstrap, rowwise_accuracy, rowwise_pearson
from palkit.export.gate import FP32_TOLERANCE, Gate

# With no flip among n examples the flip rate's 95% upper bound is still about 3/n (the rule of
# three), so an accuracy split never resolves finer than 300/n points, however few flips it saw.
RULE_OF_THREE = 3.0
CLOSE = 0.5  # print the layer table once the gated drop passes this share of the limit


def metric_rows(regression: bool, pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """The task metric in points (accuracy x 100, or Pearson x 100) of each row ([R, n] -> [R])."""
    return 100 * (rowwise_pearson(pred, gold) if regression else rowwise_accuracy(pred, gold))


def output_kl(spec, ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """KL(fp32 || bundle) per example, in nats: over the classes' softmax, or for regression over
    the Bernoulli of the score's place in score_range (the head's own sigmoid)."""
    if not spec.is_regression:
        return F.kl_div(F.log_softmax(got.double(), -1), F.log_softmax(ref.double(), -1),
                        log_target=True, reduction="none").sum(-1)
    low, high = spec.score_range
    p, q = ((x[:, 0].double() - low) / (high - low) for x in (ref, got))
    p, q = p.clamp(1e-7, 1 - 1e-7), q.clamp(1e-7, 1 - 1e-7)
    return p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()


def compare(spec, ref: torch.Tensor, got: torch.Tensor, gold: list | None, source: str,
            gate: Gate = Gate(), firsts: list[list[int]] | None = None) -> dict[str, Any]:
    """One task's verification record (bundle outputs `got` against PyTorch's `ref`); a
    tagging task's outputs are [inputs, tokens, tags], read at each word's first piece
    (`firsts`)."""
    from palkit.trainer.metrics import task_metrics

    if spec.is_tagging or spec.is_multi_label:
        return compare_named(spec, ref, got, gold, source, gate, firsts)

    n = len(ref)
    r: dict[str, Any] = {"examples": n, "source": source,
                         "max_abs_diff": float((ref - got).abs().max())}
    kl = output_kl(spec, ref, got)
    r["kl_mean"], r["kl_p99"] = float(kl.mean()), float(torch.quantile(kl, 0.99))
    if spec.is_regression:
        pred_ref, pred_got = ref[:, 0], got[:, 0]
        agree_with = rowwise_pearson
        r["agreement_kind"] = "pearson(bundle, pytorch) of scores"
    else:
        pred_ref, pred_got = ref.argmax(-1), got.argmax(-1)
        agree_with = rowwise_accuracy
        r["agreement_kind"] = "fraction of equal argmax"
    ref_np, got_np = pred_ref.detach().cpu().numpy(), pred_got.detach().cpu().numpy()
    # one seed for both statistics: the agreement and the change see the same resamples
    agreement = paired_bootstrap(lambda i: agree_with(ref_np[i], got_np[i]), [n],
                                 gate.resamples, gate.seed)
    r["agreement"] = round(agreement.value, 6) if spec.is_regression else agreement.value
    r["agreement_interval"] = agreement.interval
    if gold is None:
        return r
    g = torch.tensor(gold)
    m_ref = task_metrics(spec, pred_ref.float(), g)
    m_got = task_metrics(spec, pred_got.float(), g)
    r["metrics_pytorch_fp32"], r["metrics_bundle"] = m_ref, m_got
    r["metric_deltas"] = {k: m_got[k] - m_ref[k] for k in m_ref}
    r["metric"] = f"{spec.name}_pearson" if spec.is_regression else f"{spec.name}_acc"
    truth = (g if spec.is_regression else g.long()).numpy()
    reg = spec.is_regression
    change = paired_bootstrap(lambda i: metric_rows(reg, got_np[i], truth[i])
                              - metric_rows(reg, ref_np[i], truth[i]), [n],
                              gate.resamples, gate.seed)
    r["metric_change"] = change.value  # points, bundle - fp32
    r["metric_change_interval"] = change.interval
    if not spec.is_regression:
        right_ref, right_got = pred_ref == g.long(), pred_got == g.long()
        r["flips"] = {"gained": int((right_got & ~right_ref).sum()),
                      "lost": int((right_ref & ~right_got).sum())}
    r["resolution"] = resolution(r["metric_change_interval"], n, spec.is_regression)
    r["verdict"] = verdict(r, gate)
    return r


def compare_named(spec, ref: torch.Tensor, got: torch.Tensor, gold: list | None, source: str,
                  gate: Gate, firsts: list[list[int]] | None) -> dict[str, Any]:
    """compare() for a multi_label or token_tagging task: KL and agreement over its decisions
    (each label's sigmoid; each word's tags), the metric (exact-set accuracy; span F1) and its
    change with the paired bootstrap over texts."""
    from palkit.runtime.labels import label_set, span_counts, word_tags
    from palkit.trainer.metrics import task_metrics

    n, labels = len(ref), list(spec.labels)
    r: dict[str, Any] = {"examples": n, "source": source}
    if spec.is_tagging:
        assert firsts is not None
        rows = [(i, p) for i, f in enumerate(firsts) for p in f if p >= 0]
        ref_w = torch.stack([ref[i, p] for i, p in rows])
        got_w = torch.stack([got[i, p] for i, p in rows])
        kl = F.kl_div(F.log_softmax(got_w.double(), -1), F.log_softmax(ref_w.double(), -1),
                      log_target=True, reduction="none").sum(-1)
        equal = (ref_w.argmax(-1) == got_w.argmax(-1)).double().numpy()
        words = [len(g) for g in gold] if gold is not None else [len(f) for f in firsts]
        pred_ref = [tuple(word_tags(ref[i].tolist(), firsts[i], labels, words[i])) for i in range(n)]
        pred_got = [tuple(word_tags(got[i].tolist(), firsts[i], labels, words[i])) for i in range(n)]
        r["agreement_kind"] = "fraction of words with equal tags"
    else:
        p, q = (torch.sigmoid(x.double()).clamp(1e-7, 1 - 1e-7) for x in (ref, got))
        kl = (p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()).sum(-1)
        pred_ref = [label_set(x.tolist(), labels, spec.threshold) for x in ref]
        pred_got = [label_set(x.tolist(), labels, spec.threshold) for x in got]
        equal = np.array([set(a) == set(b) for a, b in zip(pred_ref, pred_got)], dtype=float)
        r["agreement_kind"] = "fraction of equal label sets"
    r["max_abs_diff"] = float((ref - got).abs().max())
    r["kl_mean"], r["kl_p99"] = float(kl.mean()), float(torch.quantile(kl, 0.99))
    agreement = paired_bootstrap(lambda i: equal[i].mean(axis=-1), [len(equal)], gate.resamples,
                                 gate.seed)
    r["agreement"], r["agreement_interval"] = agreement.value, agreement.interval
    if gold is None:
        return r
    m_ref, m_got = task_metrics(spec, pred_ref, gold), task_metrics(spec, pred_got, gold)
    r["metrics_pytorch_fp32"], r["metrics_bundle"] = m_ref, m_got
    r["metric_deltas"] = {k: m_got[k] - m_ref[k] for k in m_ref}
    r["metric"] = f"{spec.name}_f1" if spec.is_tagging else f"{spec.name}_acc"
    if spec.is_tagging:
        counts = [np.array([[c.correct, c.predicted, c.gold] for c in
                            (span_counts(g, p) for p, g in zip(preds, gold))], dtype=float)
                  for preds in (pred_ref, pred_got)]

        def points(c: np.ndarray, i: np.ndarray) -> np.ndarray:   # span F1 of each resample
            s = c[i].sum(axis=-2)
            return 100 * 2 * s[..., 0] / np.maximum(s[..., 1] + s[..., 2], 1)
    else:
        counts = [np.array([set(p) == set(g) for p, g in zip(preds, gold)], dtype=float)
                  for preds in (pred_ref, pred_got)]

        def points(c: np.ndarray, i: np.ndarray) -> np.ndarray:   # exact-set accuracy
            return 100 * c[i].mean(axis=-1)
    right_ref, right_got = counts
    change = paired_bootstrap(lambda i: points(right_got, i) - points(right_ref, i), [n],
                              gate.resamples, gate.seed)
    r["metric_change"], r["metric_change_interval"] = change.value, change.interval
    whole_ref = [p == g if spec.is_tagging else set(p) == set(g) for p, g in zip(pred_ref, gold)]
    whole_got = [p == g if spec.is_tagging else set(p) == set(g) for p, g in zip(pred_got, gold)]
    r["flips"] = {"gained": sum(b and not a for a, b in zip(whole_ref, whole_got)),
                  "lost": sum(a and not b for a, b in zip(whole_ref, whole_got))}
    r["resolution"] = resolution(r["metric_change_interval"], n, False)
    r["verdict"] = verdict(r, gate)
    return r


def resolution(change_interval: list[float], n: int, regression: bool) -> float:
    """Points of the metric a split of n examples resolves: its 95% interval's half-width, and
    for accuracy at least the rule of three's 300/n."""
    low, high = change_interval
    floor = 0.0 if regression else 100 * RULE_OF_THREE / n
    return max((high - low) / 2, floor)


def verdict(r: dict[str, Any], gate: Gate) -> str | None:
    """'loss' (a drop beyond max_drop that the split resolves, or whose whole interval lies
    beyond it), 'unresolved' (the split is coarser than max_drop and shows no such loss) or
    'within'; None without labels or a metric gate."""
    if gate.max_drop is None or "metric_change" not in r:
        return None
    limit = gate.max_drop
    beyond = r["metric_change"] < -limit
    if beyond and (r["resolution"] <= limit or r["metric_change_interval"][1] < -limit):
        return "loss"
    return "unresolved" if r["resolution"] > gate.max_drop else "within"


def drop_bound(r: dict[str, Any]) -> float | None:
    """The largest metric drop (points) the record's 95% interval allows; None without labels."""
    return -r["metric_change_interval"][0] if "metric_change_interval" in r else None


def refuses(r: dict[str, Any], gate: Gate) -> bool:
    """Whether the metric gate refuses the record: the measured change is a drop beyond
    max_drop, or with `strict` the interval allows one."""
    if gate.max_drop is None or "metric_change" not in r:
        return False
    if gate.strict:
        return drop_bound(r) > gate.max_drop
    return r["metric_change"] < -gate.max_drop


def change_text(r: dict[str, Any]) -> str:
    lo, hi = r["metric_change_interval"]
    return (f"change {r['metric_change']:+.2f}, 95% interval [{lo:+.2f}, {hi:+.2f}] on "
            f"{r['examples']} examples, which resolve ±{r['resolution']:.2f}; "
            f"agreement {r['agreement']:.3f}")


def failure(r: dict[str, Any], where: str, int8: bool, gate: Gate) -> str | None:
    """Why the record fails the gate, in one clause with its numbers; None when it passes."""
    if not int8:
        if r["max_abs_diff"] > FP32_TOLERANCE:
            return (f"{where}: fp32 outputs differ from PyTorch by {r['max_abs_diff']:.2e} "
                    f"(> {FP32_TOLERANCE:g})")
        return None
    if refuses(r, gate):
        limit = f"--max-drop {gate.max_drop:g}"
        if gate.strict:
            return (f"{where}: int8 may lose up to {drop_bound(r):.2f} points of {r['metric']} "
                    f"({change_text(r)}) > {limit} (--strict-gate)")
        if r["verdict"] == "loss":
            return (f"{where}: int8 loses {-r['metric_change']:.2f} points of {r['metric']} "
                    f"({change_text(r)}) > {limit}")
        return (f"{where}: int8 changes {r['metric']} by {r['metric_change']:+.2f} points, beyond "
                f"{limit}, on {r['examples']} examples that resolve only ±{r['resolution']:.2f} "
                f"(95% interval [{r['metric_change_interval'][0]:+.2f}, "
                f"{r['metric_change_interval'][1]:+.2f}]): more dev examples would tell")
    floor = gate.min_agreement
    if floor is None:  # off where dev labels let --max-drop judge
        floor = 0.0 if "metric" in r else 0.9
    if r["agreement_interval"][1] < floor:
        lo, hi = r["agreement_interval"]
        return (f"{where}: int8 agreement {r['agreement']:.3f} (95% interval [{lo:.3f}, "
                f"{hi:.3f}], {r['agreement_kind']}) < --min-agreement {floor:g}")
    return None


def unresolved_note(r: dict[str, Any], where: str, gate: Gate) -> str | None:
    """The one line for a split coarser than max_drop that passed; None otherwise."""
    if r.get("verdict") != "unresolved" or refuses(r, gate):
        return None
    strict = " (--strict-gate would refuse)" if drop_bound(r) > gate.max_drop else ""
    lo, hi = r["metric_change_interval"]
    return (f"{where}: {r['examples']} examples resolve ±{r['resolution']:.2f} points of "
            f"{r['metric']}, coarser than --max-drop {gate.max_drop:g}; passed on the measured "
            f"change {r['metric_change']:+.2f} (95% interval [{lo:+.2f}, {hi:+.2f}]){strict}")


def is_close(r: dict[str, Any], gate: Gate) -> bool:
    """Whether the record's gated quantity is past CLOSE of the limit (the layer table is shown)."""
    if gate.max_drop is None or "metric_change" not in r:
        return False
    drop = drop_bound(r) if gate.strict else -r["metric_change"]
    return drop > CLOSE * gate.max_drop
