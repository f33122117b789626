"""Export's verification: does the written bundle compute what the PyTorch model computes, and
does int8 cost the user anything they would notice?

Every runtime runs every task's whole dev split (or built-in sentences) against PyTorch fp32 on
the same inputs. fp32 must stay within FP32_TOLERANCE; int8 is gated on the task metric's
change, with a paired bootstrap's 95% interval (`Gate`; the rule: docs/int8-gate.md), and
`gated_export` keeps the worst layers in float when a resolved loss points at them. The
bootstrap's seed is fixed, so export stays deterministic. verify.json keeps everything.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from export.gate_limits import DEFAULT_MAX_DROP, MAX_FLOAT_LAYERS
from export.programs import reference_outputs
from export.runtime import Engine, read_bundle
from quant import onnx_int8, xnnpack
from quant.weights import ProductRanges, is_int8_table, quantize_rows
from trainer.host import cpu_model, int8_features
from ui.progress import say

Log = Callable[[str], None]

FP32_TOLERANCE = 1e-3      # max |bundle - PyTorch| allowed in fp32 outputs (typically ~1e-6)
# With no flip among n examples the flip rate's 95% upper bound is still about 3/n (the rule of
# three), so an accuracy split never resolves finer than 300/n points, however few flips it saw.
RULE_OF_THREE = 3.0
# The fallback keeps a layer in float only when its SQNR is this far below the median layer's
# (4x the typical quantization noise): below that, no one layer explains a loss.
POINTED_DB = 6.0
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
SQNR_EXAMPLES = 16         # dev examples per task replayed for the per-layer report
ALL_TASKS_EXAMPLES = 32    # per task, through the all-tasks program (it runs every task each call)
CLOSE = 0.5                # print the layer table once the gated drop passes this share of the limit
BUILTIN_SENTENCES = [
    ("a gripping, beautifully acted film", "the movie was great"),
    ("the plot was thin and the jokes fell flat", "a boring and tired story"),
    ("how do i learn to cook rice?", "what is the best way to cook rice?"),
    ("two people are playing with a ball on the grass", "a man is running"),
    ("it was fine, nothing special", "it was ok"),
    ("why do cats sleep so much?", "why do dogs bark at night?"),
    ("an awful, terrible waste of time", "i loved every minute"),
    ("a woman is slicing an onion", "a woman is cutting an onion"),
]


@dataclass(frozen=True)
class Gate:
    """What int8 must keep. `max_drop`: points of the task metric the measured change may lose
    (None: no metric gate); `strict`: the 95% interval may not allow such a loss either.
    `min_agreement`: also refuse when even the upper end of the agreement's interval is below
    this (None: 0 with dev labels, 0.9 on built-in sentences, where no metric can be scored).
    `max_examples`: dev examples per task (None: all). `keep_float`: Linears each runtime keeps
    in float from the start ({runtime: [module path]}), the fallback adding to them."""
    max_drop: float | None = DEFAULT_MAX_DROP
    strict: bool = False
    min_agreement: float | None = None
    max_examples: int | None = None
    seed: int = SEED
    resamples: int = RESAMPLES
    max_float_layers: int = MAX_FLOAT_LAYERS
    keep_float: dict[str, list[str]] = field(default_factory=dict)


# ---- inputs and the fp32 reference -----------------------------------------------------------

Encoded = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def encode_texts(tokenizer, texts: list[tuple[str, ...]], max_len: int) -> list[Encoded]:
    encs = [tokenizer(*t, truncation="longest_first", max_length=max_len,
                      return_token_type_ids=True) for t in texts]
    return [(torch.tensor([e["input_ids"]]), torch.ones(1, len(e["input_ids"]), dtype=torch.long),
             torch.tensor([e["token_type_ids"]])) for e in encs]


def verification_inputs(spec, tokenizer, max_len: int, data_dir: Path | None,
                        n: int | None) -> tuple[list[Encoded], list[float] | None, str]:
    """The task's dev examples (at most n), their gold labels and where they came from; or the
    built-in sentences (no labels) when there is no dev file."""
    from trainer.data import read_examples

    if data_dir is not None and "dev" in spec.files and (data_dir / spec.files["dev"]).is_file():
        examples = read_examples(spec, data_dir, "dev", bad_rows="skip")[:n]
        return (encode_texts(tokenizer, [e.texts for e in examples], max_len),
                [e.label for e in examples], f"{len(examples)} dev examples from {data_dir}")
    texts = [pair if spec.is_pair else pair[:1] for pair in BUILTIN_SENTENCES]
    return (encode_texts(tokenizer, texts, max_len), None,
            "built-in sentences (no dev data found)")


def reference_batched(model, task: str, encoded: list[Encoded], batch: int = 64) -> torch.Tensor:
    """PyTorch fp32 outputs of `task` for every input, in batches of similar length (padding
    is masked, so each row is what the input alone gives, within float rounding)."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i][0].shape[1])
    out: list[torch.Tensor | None] = [None] * len(encoded)
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        width = max(encoded[i][0].shape[1] for i in chunk)
        ids, mask, types = (torch.zeros(len(chunk), width, dtype=torch.long) for _ in range(3))
        for row, i in enumerate(chunk):
            n = encoded[i][0].shape[1]
            ids[row, :n], mask[row, :n], types[row, :n] = (x[0] for x in encoded[i])
        for row, value in zip(chunk, reference_outputs(model, task, ids, mask, types)):
            out[row] = value
    return torch.stack(out)  # type: ignore[arg-type]


# ---- statistics ------------------------------------------------------------------------------

def bootstrap_indices(n: int, resamples: int, seed: int) -> torch.Tensor:
    """[resamples, n] example indices drawn with replacement (fixed seed: deterministic)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (resamples, n), generator=g)


def rowwise_pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of each row of x with the same row of y ([R, n] -> [R])."""
    x = x.double() - x.double().mean(-1, keepdim=True)
    y = y.double() - y.double().mean(-1, keepdim=True)
    denom = x.norm(dim=-1) * y.norm(dim=-1)
    return torch.where(denom > 0, (x * y).sum(-1) / denom.clamp(min=1e-300), 0.0)


def metric_rows(regression: bool, pred: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """The task metric in points (accuracy x 100, or Pearson x 100) of each row ([R, n] -> [R])."""
    if regression:
        return 100 * rowwise_pearson(pred, gold)
    return 100 * (pred == gold).double().mean(-1)


def interval(samples: torch.Tensor, confidence: float = CONFIDENCE) -> list[float]:
    """The central `confidence` interval of bootstrap samples (percentile method)."""
    tail = (1 - confidence) / 2
    lo, hi = torch.quantile(samples.double(), torch.tensor([tail, 1 - tail], dtype=torch.double))
    return [float(lo), float(hi)]


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


def compare(spec, ref: torch.Tensor, got: torch.Tensor, gold: list[float] | None, source: str,
            gate: Gate = Gate()) -> dict[str, Any]:
    """One task's verification record (bundle outputs `got` against PyTorch's `ref`)."""
    from trainer.metrics import task_metrics

    n = len(ref)
    idx = bootstrap_indices(n, gate.resamples, gate.seed)
    r: dict[str, Any] = {"examples": n, "source": source,
                         "max_abs_diff": float((ref - got).abs().max())}
    kl = output_kl(spec, ref, got)
    r["kl_mean"], r["kl_p99"] = float(kl.mean()), float(torch.quantile(kl, 0.99))
    if spec.is_regression:
        pred_ref, pred_got = ref[:, 0], got[:, 0]
        agree = rowwise_pearson(pred_ref[idx], pred_got[idx])
        r["agreement"] = round(float(rowwise_pearson(pred_ref[None], pred_got[None])[0]), 6)
        r["agreement_kind"] = "pearson(bundle, pytorch) of scores"
    else:
        pred_ref, pred_got = ref.argmax(-1), got.argmax(-1)
        same = (pred_ref == pred_got).double()
        agree = same[idx].mean(-1)
        r["agreement"] = float(same.mean())
        r["agreement_kind"] = "fraction of equal argmax"
    r["agreement_interval"] = interval(agree)
    if gold is None:
        return r
    g = torch.tensor(gold)
    m_ref = task_metrics(spec, pred_ref.float(), g)
    m_got = task_metrics(spec, pred_got.float(), g)
    r["metrics_pytorch_fp32"], r["metrics_bundle"] = m_ref, m_got
    r["metric_deltas"] = {k: m_got[k] - m_ref[k] for k in m_ref}
    r["metric"] = f"{spec.name}_pearson" if spec.is_regression else f"{spec.name}_acc"
    truth = g if spec.is_regression else g.long()
    full = metric_rows(spec.is_regression, torch.stack([pred_got, pred_ref]),
                       truth.expand(2, n))
    r["metric_change"] = float(full[0] - full[1])  # points, bundle - fp32
    changes = (metric_rows(spec.is_regression, pred_got[idx], truth[idx]) -
               metric_rows(spec.is_regression, pred_ref[idx], truth[idx]))
    r["metric_change_interval"] = interval(changes)
    if not spec.is_regression:
        right_ref, right_got = pred_ref == truth, pred_got == truth
        r["flips"] = {"gained": int((right_got & ~right_ref).sum()),
                      "lost": int((right_ref & ~right_got).sum())}
    r["resolution"] = resolution(r["metric_change_interval"], n, spec.is_regression)
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


# ---- where int8 hurts: per-layer SQNR ----------------------------------------------------------

def fake_int8_weight(w: torch.Tensor, ranges: ProductRanges | None = None) -> torch.Tensor:
    """w as the runtimes' weight recipes store it (quant/weights.py: int8 per output row, within
    `ranges`' weights; None: plain [-127, 127])."""
    q, scale = quantize_rows(w, ranges)
    return q.float() * scale[:, None]


def fake_int8_activation(x: torch.Tensor, per_token: bool, symmetric: bool = False,
                         steps: int = 255) -> torch.Tensor:
    """Dynamic 8-bit activations: one range per token (each row of the last dimension) or one
    for the whole tensor; asymmetric (`steps` steps over [min, max] with 0 included: XNNPACK's
    qd8 and ONNX Runtime's DynamicQuantizeLinear at 255, quant/onnx_int8.py's per-token rows at
    its ranges) or symmetric (steps // 2 each side of 0: quant/onnx_int8.py's
    `symmetric_activations`)."""
    dims = (-1,) if per_token else tuple(range(x.dim()))
    if symmetric:
        half = steps // 2
        scale = (x.abs().amax(dim=dims, keepdim=True) / half).clamp(min=1e-30)
        return (x / scale).round().clamp(-half, half) * scale
    low = x.amin(dim=dims, keepdim=True).clamp(max=0)
    high = x.amax(dim=dims, keepdim=True).clamp(min=0)
    scale = ((high - low) / steps).clamp(min=1e-30)
    zero = (-low / scale).round()
    return ((x / scale).round() + zero).clamp(0, 255).sub(zero) * scale


# Both runtimes quantize a Linear the same way (int8 weights per output channel, asymmetric
# per-token activations: XNNPACK's qd8, quant/onnx_int8.py's rows), each within its own integer
# ranges; they differ in whether the tasks' own Linears (PAL, head) are int8: ExecuTorch takes
# task weights as method inputs and runs them in fp32; ONNX Runtime's adapters hold them as int8.
TASK_LAYERS_INT8 = {"executorch": False, "onnxruntime": True}


def product_ranges(runtime: str) -> ProductRanges:
    """The integer ranges `runtime`'s int8 Linears multiply."""
    return {"onnxruntime": onnx_int8.RANGES, "executorch": xnnpack.RANGES}[runtime]


def layer_sqnr(model, tasks: list[str], inputs: dict[str, Any], runtimes: list[str],
               n: int = SQNR_EXAMPLES) -> dict[str, list[dict[str, Any]]]:
    """For each runtime, the SQNR (dB) of every layer it runs in int8 (Linears and the word
    table: `kind`), worst first, over the first n inputs of each task one at a time. Each layer
    is fed the fp32 model's own input, so its figure is its own error, not its inputs'."""
    names = {m: name for name, m in model.named_modules() if isinstance(m, nn.Linear)
             or isinstance(m, nn.Embedding) and is_int8_table(name)}
    replays = {product_ranges(r) for r in runtimes}  # one replay per distinct recipe
    weights = {m: fake_int8_weight(m.weight.detach().float()) for m in names
               if isinstance(m, nn.Embedding)}  # tables: plain rows on both runtimes
    weights.update({(m, ranges): fake_int8_weight(m.weight.detach().float(), ranges)
                    for m in names if isinstance(m, nn.Linear) for ranges in replays})
    sums: dict[tuple[ProductRanges, str], list[float]] = {}

    def int8_output(module: nn.Module, x: torch.Tensor, ranges: ProductRanges) -> torch.Tensor:
        if isinstance(module, nn.Embedding):
            return F.embedding(x, weights[module])
        x = fake_int8_activation(x, per_token=True, steps=ranges.activation_steps)
        return F.linear(x, weights[module, ranges], module.bias)

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        for ranges in replays:
            noise = (out - int8_output(module, args[0], ranges)).double().pow(2).sum()
            s = sums.setdefault((ranges, names[module]), [0.0, 0.0])
            s[0] += float(out.double().pow(2).sum())
            s[1] += float(noise)

    handles = [m.register_forward_hook(hook) for m in names]
    try:
        for t in tasks:
            for ids, mask, types in inputs[t][0][:n]:
                reference_outputs(model, t, ids, mask, types)
    finally:
        for h in handles:
            h.remove()

    kinds = {name: "embedding" if isinstance(m, nn.Embedding) else "linear"
             for m, name in names.items()}

    def table(runtime: str) -> list[dict[str, Any]]:
        ranges = product_ranges(runtime)
        rows = ({"layer": name, "kind": kinds[name],
                 "sqnr_db": round(10 * math.log10(max(s, 1e-30) / max(noise, 1e-30)), 2)}
                for (r, name), (s, noise) in sums.items() if r == ranges
                and (name.startswith("trunk.") or TASK_LAYERS_INT8[runtime]))
        return sorted(rows, key=lambda row: row["sqnr_db"])

    return {r: table(r) for r in runtimes}


def fallback_candidates(runtime: str, layers: list[dict[str, Any]]) -> list[str]:
    """Layers the fallback may keep in float, worst SQNR first: the trunk's (a float Linear runs
    in the same XNNPACK delegate on ExecuTorch; on ONNX Runtime the task matrices are int8
    adapter inputs of the shared graph, one .onnx_adapter per task)."""
    return [r["layer"] for r in layers if r["layer"].startswith("trunk.") and r["kind"] == "linear"]


def pointed_layers(runtime: str, layers: list[dict[str, Any]]) -> list[str]:
    """The fallback candidates the SQNR table points at: POINTED_DB or more below the median of
    the runtime's layers, worst first."""
    if not layers:
        return []
    median = statistics.median(r["sqnr_db"] for r in layers)
    low = {r["layer"] for r in layers if r["sqnr_db"] <= median - POINTED_DB}
    return [c for c in fallback_candidates(runtime, layers) if c in low]


def layer_table(layers: list[dict[str, Any]]) -> str:
    """The eight worst layers."""
    return "\n".join([f"    {'layer':52s} SQNR dB"] +
                     [f"    {r['layer']:52s} {r['sqnr_db']:7.1f}" for r in layers[:8]])


# ---- running the bundle ----------------------------------------------------------------------

def run_task(engine: Engine, task: str, encoded: list[Encoded],
             whole: bool = False) -> tuple[torch.Tensor, float]:
    """The engine's outputs for every input and its mean milliseconds per call; `whole`:
    through the all-tasks program, reading the task's own output slot."""
    got, ms = [], 0.0
    for ids, mask, types in encoded:
        if whole:
            outs, t = engine.run_all_ids(ids.numpy(), mask.numpy(), types.numpy())
            out = outs[task]
        else:
            out, t, _ = engine.run_ids(task, ids.numpy(), mask.numpy(), types.numpy())
        got.append(torch.from_numpy(out))
        ms += t
    return torch.stack(got), ms / max(1, len(encoded))


class Verifier:
    """The inputs and fp32 references of one export, computed once, and the checks of each
    runtime of the bundle written in `folder`."""

    def __init__(self, folder: Path, model, tokenizer, max_len: int, data_dir: Path | None,
                 int8: bool, gate: Gate, tasks: list[str], log: Log = say):
        self.folder, self.model, self.int8, self.gate, self.tasks, self.log = \
            folder, model, int8, gate, tasks, log
        self.inputs = {t: verification_inputs(model.tasks[t], tokenizer, max_len, data_dir,
                                              gate.max_examples) for t in tasks}
        self.sqnr: dict[str, list[dict[str, Any]]] = {}
        t0 = time.time()
        self.refs = {t: reference_batched(model, t, self.inputs[t][0]) for t in tasks}
        log(f"fp32 reference for {sum(len(r) for r in self.refs.values())} examples in "
            f"{time.time() - t0:.1f} s ({torch.get_num_threads()} threads)")

    def check(self, runtime: str, tasks: list[str] | None = None) -> dict[str, Any]:
        """The runtime's records (per task, and its all-tasks program's when it has one for
        exactly these tasks), failures, bytes and mean latency per call; `tasks`: only these
        (the fallback's first look at a step), the all-tasks program left out."""
        tasks = tasks or self.tasks
        bundle = read_bundle(self.folder)
        engine = Engine(bundle, runtime)
        self.log(f"verifying {runtime}: {', '.join(tasks)} "
                 f"({sum(len(self.inputs[t][0]) for t in tasks)} examples)")
        # mean_ms: kept only where the fallback reports its cost, so verify.json is otherwise
        # the same bytes on every export of the same model
        section: dict[str, Any] = {"tasks": {}, "failures": [], "notes": [], "mean_ms": {}}
        outputs = {}
        for t in tasks:
            encoded, gold, source = self.inputs[t]
            outputs[t], section["mean_ms"][t] = run_task(engine, t, encoded)
            r = compare(self.model.tasks[t], self.refs[t], outputs[t], gold, source, self.gate)
            section["tasks"][t] = r
            where = f"{runtime}/{t}"
            section["failures"] += [f for f in [failure(r, where, self.int8, self.gate)] if f]
            section["notes"] += [n for n in [self.int8 and unresolved_note(r, where, self.gate)]
                                 if n]
        for note in section["notes"]:
            self.log(f"note: {note}")
        program = engine.all_tasks_program()
        if tasks == self.tasks and program and set(program) <= set(tasks):
            # add_adapter leaves the program unchanged; its tasks are then not all checked here
            section["all_tasks_program"] = self.check_all_tasks(engine, program, outputs)
            section["failures"] += section["all_tasks_program"].pop("failures")
        files = self.folder / ("executorch" if runtime == "executorch" else "onnx")
        section["bytes"] = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
        return section

    def check_all_tasks(self, engine: Engine, program: list[str],
                        single: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The all-tasks program on the first inputs of each task. It must compute what the
        task's own program computes (already gated above): fp32 within FP32_TOLERANCE of
        PyTorch; int8 the same predictions as the task's int8 program."""
        tasks, failures = {}, []
        for t in program:
            encoded, gold, source = self.inputs[t]
            n = min(len(encoded), ALL_TASKS_EXAMPLES)
            got, _ = run_task(engine, t, encoded[:n], whole=True)
            r = compare(self.model.tasks[t], self.refs[t][:n], got, None, f"first {n} of {source}",
                        self.gate)
            own = single[t][:n]
            r["max_abs_diff_vs_task_program"] = float((own - got).abs().max())
            where = f"{engine.runtime}/all-tasks program/{t}"
            if not self.int8:
                failures += [f for f in [failure(r, where, False, self.gate)] if f]
            if self.int8 and not self.model.tasks[t].is_regression:
                same = float((own.argmax(-1) == got.argmax(-1)).double().mean())
                r["agreement_with_task_program"] = same
                if same < 1.0 - 1.0 / n:  # one flip in n may sit on a decision boundary
                    failures.append(f"{where}: int8 predictions differ from {t}'s own program "
                                    f"on {1 - same:.1%} of {n} examples")
            tasks[t] = r
        return {"tasks": tasks, "failures": failures}

    def layers(self, runtime: str) -> list[dict[str, Any]]:
        """The per-layer SQNR table of `runtime` (every runtime's computed on the first call)."""
        if runtime not in self.sqnr:
            self.sqnr = layer_sqnr(self.model, self.tasks, self.inputs, list(TASK_LAYERS_INT8))
        return self.sqnr[runtime]


def summary(report: dict[str, Any]) -> str:
    """The refusal's one line."""
    return "verification failed: " + "; ".join(report["failures"])


def verify_bundle(folder: Path, model, tokenizer, max_len: int, data_dir: Path | None,
                  int8: bool, gate: Gate, tasks: list[str], log: Log = say) -> dict[str, Any]:
    """Check every runtime of the bundle written in `folder` (no fallback: add-task)."""
    v = Verifier(folder, model, tokenizer, max_len, data_dir, int8, gate, tasks, log)
    return assemble(v, {r: v.check(r) for r in read_bundle(folder).runtimes})


def assemble(v: Verifier, sections: dict[str, dict[str, Any]],
             **optional: dict[str, Any]) -> dict[str, Any]:
    """verify.json's body; each of `optional` only when not empty."""
    for s in sections.values():
        del s["mean_ms"]
    failures = [f for s in sections.values() for f in s["failures"]]
    notes = [n for s in sections.values() for n in s.pop("notes")]
    # int8's figures are this CPU's kernels' (docs/int8-gate.md, "Every CPU")
    report: dict[str, Any] = {"tolerance_fp32": FP32_TOLERANCE, "gate": asdict(v.gate),
                              "confidence": CONFIDENCE,
                              "verifying_machine": f"{cpu_model()} ({int8_features()})",
                              "runtimes": sections,
                              "passed": not failures, "failures": failures, "notes": notes}
    return {**report, **{key: value for key, value in optional.items() if value}}


def gated_export(write: Callable[[str, list[str]], None], folder: Path, model, tokenizer,
                 max_len: int, data_dir: Path | None, int8: bool, gate: Gate, tasks: list[str],
                 runtimes: list[str], log: Log = say) -> dict[str, Any]:
    """Check each runtime of the bundle in `folder`; where int8 fails the gate on a measured
    loss, fall back (`fall_back`). Returns verify.json's body, with the per-layer SQNR and the
    fallback's steps and costs, or why it was not tried."""
    v = Verifier(folder, model, tokenizer, max_len, data_dir, int8, gate, tasks, log)
    sections, layers, fallback, skipped = {}, {}, {}, {}
    for runtime in runtimes:
        t0 = time.time()
        section = v.check(runtime)
        log(f"verified {runtime} in {time.time() - t0:.0f} s")
        if int8:
            t0 = time.time()
            layers[runtime] = v.layers(runtime)
            log(f"{runtime}: per-layer SQNR in {time.time() - t0:.1f} s")
            close = any(is_close(r, gate) for r in section["tasks"].values())
            if section["failures"] or close:
                log(f"{runtime}: {'gate failed' if section['failures'] else 'gate close'}; "
                    f"worst int8 layers (output SQNR on dev inputs):\n"
                    + layer_table(layers[runtime]))
        if section["failures"] and int8:
            section, entry = fall_back(v, write, runtime, section, layers[runtime])
            if "skipped" in entry:
                skipped[runtime] = entry["skipped"]
            else:
                fallback[runtime] = entry
        sections[runtime] = section
    # fallback_skipped: why no layer was kept in float, per runtime
    return assemble(v, sections, layers=layers, fallback=fallback, fallback_skipped=skipped)


def fall_back(v: Verifier, write: Callable[[str, list[str]], None], runtime: str,
              section: dict[str, Any], layers: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Keep the layers the SQNR table points at in float, worst first, `write(runtime,
    float_layers)` that runtime again and check it, until it passes or `gate.max_float_layers`
    are kept; only when every failure is a measured loss. A step checks the failing tasks first
    (a float trunk layer changes every task, so all are checked once those pass; a refusal's
    report names the tasks its last step did not check again). Returns the last section and
    verify.json's fallback entry, or {"skipped": why} when no layer was tried."""
    gate, log = v.gate, v.log
    failing = [t for t, r in section["tasks"].items() if failure(r, t, True, gate)]
    unresolved = [t for t in failing if refuses(section["tasks"][t], gate)
                  and section["tasks"][t]["verdict"] != "loss"]
    kept = list(gate.keep_float.get(runtime, []))
    candidates = [c for c in pointed_layers(runtime, layers) if c not in kept]
    reason = skip_reason(gate, unresolved, candidates, layers)
    if reason:
        log(f"{runtime}: no layer kept in float: {reason}")
        return section, {"skipped": reason}
    first, steps = section, []
    while section["failures"] and len(steps) < min(gate.max_float_layers, len(candidates)):
        kept.append(candidates[len(steps)])
        log(f"{runtime}: keeping {kept[-1]} in float ({len(kept)}/{gate.max_float_layers}) "
            f"after: {section['failures'][0]}")
        write(runtime, list(kept))
        section = v.check(runtime, failing or None)
        if not section["failures"] and failing:
            section = v.check(runtime)
        steps.append({"float_layers": list(kept), "failures": section["failures"],
                      "drop_bounds": {t: drop_bound(r) for t, r in section["tasks"].items()}})
    section["not_rechecked"] = [t for t in v.tasks if t not in section["tasks"]]
    # what keeping layers in float cost: the runtime's bytes and each task's mean latency per
    # call over its verification inputs (same inputs, same process), before and after
    return section, {
        "float_layers": steps[-1]["float_layers"], "steps": steps,
        "before": {"failures": first["failures"], "bytes": first["bytes"],
                   "mean_ms": first["mean_ms"],
                   "drop_bounds": {t: drop_bound(r) for t, r in first["tasks"].items()}},
        "bytes_ratio": section["bytes"] / first["bytes"], "mean_ms": section["mean_ms"],
        "latency_ratio": {t: ms / max(first["mean_ms"][t], 1e-9)
                          for t, ms in section["mean_ms"].items()}}


def skip_reason(gate: Gate, unresolved: list[str], candidates: list[str],
                layers: list[dict[str, Any]]) -> str | None:
    """Why keeping layers in float cannot help this failure; None when it may."""
    if gate.max_float_layers == 0:
        return "the fallback is off (max_float_layers 0)"
    if unresolved:
        return (f"{', '.join(unresolved)}: not a loss the dev split resolves, so no layer can be "
                "blamed (more dev examples, or --max-drop, decide it)")
    if not candidates:
        median = statistics.median(r["sqnr_db"] for r in layers)
        return (f"no layer's SQNR stands out (worst {layers[0]['sqnr_db']:.1f} dB, median "
                f"{median:.1f}; the fallback needs {POINTED_DB:g} dB below the median)")
    return None
