"""The int8 gate on a trained model: results/int8-gate.json and .md.

    python -m lab.int8_gate MODEL_DIR --steps N --work DIR [--data-dir DIR] [--keep 2]

0. PyTorch fp32 outputs for every dev and test example of every task (the reference).
1. ONNX Runtime's int8 recipes (RECIPES: palkit's and the ones ONNX Runtime's quantizers offer):
   per-layer SQNR replayed, metric change on dev and test with intervals, agreement, bytes,
   and one-task latency (1 thread, 128 tokens, the recipes in alternation in one process).
2. `palkit export` with the default gate (every runtime, every task, all of dev): the gate's
   records, the per-layer SQNR, the fallback if it ran, and how long verification took.
3. The same model with every Linear int8 ("plain", the default bundle when no fallback ran) and
   with the `--keep` worst layers by SQNR kept in float ("float", the fallback's bundle when it
   ran): metric changes on dev and test, flips, KL, bytes, and one-task latency as in 1.
4. False refusals: the plain bundle's dev outputs gated again with 20 bootstrap seeds and on 20
   random halves of dev.
Run it under `flock /tmp/palkit-cpu.lock` on a shared host: step 1 and 3 time things.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

from palkit.core.fileio import write_json, write_text
from palkit.core.options import resolve_data_dir
from palkit.export.bundle import export_run
from palkit.export.gate import Gate
from palkit.export.gate_stats import compare, failure
from palkit.export.options import ExportOptions
from palkit.export.verify import reference_batched, run_task
from palkit.quant.onnx_int8 import quantize_trunk as palkit_quantize_trunk
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.manifest import MANIFEST_FILE
from palkit.runtime.runners import set_executorch_threads
from palkit.trainer.checkpoint import load_model
from palkit.trainer.data import read_examples

OFF = dict(max_drop=None, min_agreement=-1.0)  # no gate (Pearson agreement can be < 0)
REUSE = False
LATENCY_TOKENS = 128
LATENCY_CALLS = 20
ROUNDS = 7
TIMED_TASK = "sst"
TASK_ORDER = ("sst", "quora", "sts")


def machine() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), platform.processor())
    vnni = "avx512_vnni" in out
    return f"{name}, {torch.get_num_threads()} threads visible{', AVX-512 VNNI' if vnni else ''}"


def export(model_dir: Path, out: Path, data: Path, gate: Gate, lines: list[str]) -> dict[str, Any]:
    """Export (or, with --reuse, read back an earlier run's bundle or refusal and its log)."""
    t0 = time.time()
    refused = out.parent / f"{out.name}.refused-verify.json"
    saved = out.parent / f"{out.name}.log.json"
    if REUSE and ((out / "verify.json").is_file() or refused.is_file()) and saved.is_file():
        lines += json.loads(saved.read_text())["lines"]
        done = out / "verify.json" if (out / "verify.json").is_file() else refused
        return {"seconds": json.loads(saved.read_text())["seconds"],
                "report": json.loads(done.read_text())}

    def log(message: str) -> None:
        lines.append(f"{time.time() - t0:7.1f}s {message}")
        print(lines[-1], flush=True)

    try:
        export_run(model_dir, out,
                   ExportOptions(target="android", quant="int8", data_dir=data, gate=gate,
                                 overwrite=True),
                   log=log)
        report = json.loads((out / "verify.json").read_text())
    except Exception as e:  # a refusal: its report lies beside the target
        log(f"refused: {e}")
        report = json.loads(refused.read_text())
    write_json(saved, {"lines": lines, "seconds": time.time() - t0})
    return {"seconds": time.time() - t0, "report": report}


def split_inputs(model, tokenizer, data: Path, split: str, max_len: int):
    from palkit.export.verify import encode_texts
    out = {}
    for t, spec in model.tasks.items():
        examples = read_examples(spec, data, split, bad_rows="skip")
        out[t] = (encode_texts(tokenizer, [e.texts for e in examples], max_len),
                  [e.label for e in examples])
    return out


def score(bundle: Path, model, inputs, refs,
          runtimes: tuple[str, ...] = ("executorch", "onnxruntime")) -> dict[str, Any]:
    """Per runtime and task: compare() of the bundle's outputs against fp32, and the outputs."""
    rows, outputs = {}, {}
    for runtime in runtimes:
        engine = Engine(load_bundle(bundle), runtime, threads=1)  # a 2nd thread spins on a busy host
        for t, (encoded, gold) in inputs.items():
            got, _ = run_task(engine, t, encoded)
            outputs[(runtime, t)] = got
            rows[f"{runtime}/{t}"] = compare(model.tasks[t], refs[t], got, gold, "study")
    return {"records": rows, "outputs": outputs}


def timed_input(tokenizer, dev: dict[str, Any]) -> tuple[Any, ...]:
    """One LATENCY_TOKENS-token input: TIMED_TASK's dev sentences run together and cut there."""
    from palkit.export.verify import encode_texts
    words = " ".join(tokenizer.decode(ids[0][0, 1:-1]) for ids in dev[TIMED_TASK][0][:40])
    (ids, mask, types), = encode_texts(tokenizer, [(words,)], LATENCY_TOKENS)
    assert ids.shape[1] == LATENCY_TOKENS
    return ids.numpy(), mask.numpy(), types.numpy()


def latency(bundles: dict[str, Path], runtimes: tuple[str, ...], timed) -> dict[str, dict[str, float]]:
    """One-task latency (TIMED_TASK, ms per call, 1 thread, LATENCY_TOKENS tokens) of each bundle
    on each runtime: the engines run in alternation, ROUNDS rounds of LATENCY_CALLS calls, and
    each keeps its fastest round's mean (the least disturbed by the shared host)."""
    engines = {(name, rt): Engine(load_bundle(path), rt, threads=1)
               for name, path in bundles.items() for rt in runtimes}
    best: dict[str, dict[str, float]] = {}
    for engine in engines.values():
        engine.run_ids(TIMED_TASK, *timed)  # warm-up: adapter load, weight packing
    for _ in range(ROUNDS):
        for (name, rt), engine in engines.items():
            ms = sum(engine.run_ids(TIMED_TASK, *timed)[1] for _ in range(LATENCY_CALLS))
            row = best.setdefault(name, {})
            row[rt] = min(row.get(rt, 1e9), ms / LATENCY_CALLS)
    return best


# ---- ONNX Runtime int8 recipes -------------------------------------------------------------------
# Each writes trunk.onnx's int8 graph from the fp32 export as quant/onnx_int8.quantize_trunk
# does (same arguments); only the last one is palkit's. The others are the quantizers ONNX
# Runtime ships, with the options its docs offer for dynamic quantization.

def ort_dynamic(**options: Any):
    def write(src: Path, dst: Path, adapter_inputs: set[str], float_weights=None) -> None:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        model = onnx.load(str(src))
        adapters = sorted(n.name for n in model.graph.node
                          if any(i in adapter_inputs for i in n.input))
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, nodes_to_exclude=adapters,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}, **options)
    return write


def ort_matmul_nbits(block: int):
    """MatMulNBits with 8-bit weights in blocks of `block` along the input dimension and
    accuracy_level 4 (activations quantized to int8 per block of each row at run time)."""
    def write(src: Path, dst: Path, adapter_inputs: set[str], float_weights=None) -> None:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        model = onnx.load(str(src))
        adapters = [n.name for n in model.graph.node if any(i in adapter_inputs for i in n.input)]
        q = MatMulNBitsQuantizer(model, bits=8, block_size=block, is_symmetric=True,
                                 accuracy_level=4, nodes_to_exclude=adapters)
        q.process()
        onnx.save(q.model.model, str(dst))
    return write


def per_token_tables(int8: Callable[[str], bool]):
    """palkit's recipe with the embedding tables `int8(initializer name)` says int8."""
    def write(src: Path, dst: Path, adapter_inputs: set[str], float_weights=None) -> None:
        from palkit.quant import onnx_int8
        real = onnx_int8.is_int8_table
        onnx_int8.is_int8_table = int8
        try:
            palkit_quantize_trunk(src, dst, adapter_inputs, float_weights)
        finally:
            onnx_int8.is_int8_table = real
    return write


# name: (writer, (trunk weights, activations) as replayed for the per-layer SQNR)
RECIPES: dict[str, tuple[Any, tuple[str, str]]] = {
    "quantize_dynamic defaults (per-tensor weights)":
        (ort_dynamic(per_channel=False), ("tensor", "tensor")),
    "quantize_dynamic per_channel (palkit's first recipe)":
        (ort_dynamic(per_channel=True), ("channel", "tensor")),
    "quantize_dynamic per_channel, reduce_range":
        (ort_dynamic(per_channel=True, reduce_range=True), ("channel7", "tensor")),
    "quantize_dynamic per_channel, Gather not quantized":
        (ort_dynamic(per_channel=True, op_types_to_quantize=["MatMul"]), ("channel", "tensor")),
    "MatMulNBits 8-bit, block 32, accuracy_level 4 (embeddings float)":
        (ort_matmul_nbits(32), ("block32", "block32")),
    "per-token symmetric activations, int8 word table per row":
        (partial(palkit_quantize_trunk, symmetric_activations=True), ("channel", "token_symmetric")),
    "per-token activations, float embeddings":
        (per_token_tables(lambda name: False), ("channel", "token")),
    "per-token activations, every table int8 per row (palkit before)":
        (per_token_tables(lambda name: True), ("channel", "token")),
    "per-token activations, int8 word table per row (palkit now)":
        (palkit_quantize_trunk, ("channel", "token")),
}


def fake_weight(w: torch.Tensor, mode: str) -> torch.Tensor:
    """w [out, in] quantized as the recipe stores it: symmetric int8 per output channel, per
    tensor, per channel in 7 bits (reduce_range: [-64, 64]), or per block of 32 inputs."""
    from palkit.export.sqnr import fake_int8_weight
    if mode == "channel":
        return fake_int8_weight(w)
    if mode == "block32":
        blocks = w.reshape(w.shape[0], -1, 32)
        scale = (blocks.abs().amax(-1, keepdim=True) / 127).clamp(min=1e-12)
        return ((blocks / scale).round().clamp(-127, 127) * scale).reshape(w.shape)
    if mode == "channel7":
        scale = (w.abs().amax(dim=1, keepdim=True) / 64).clamp(min=1e-12)
        return (w / scale).round().clamp(-64, 64) * scale
    scale = (w.abs().max() / 127).clamp(min=1e-12)
    return (w / scale).round().clamp(-127, 127) * scale


def fake_activation(x: torch.Tensor, mode: str) -> torch.Tensor:
    """x quantized as the recipe does at run time: per tensor (asymmetric), per token
    (asymmetric, or symmetric), or per block of 32 (symmetric)."""
    from palkit.export.sqnr import fake_int8_activation
    if mode == "block32":
        blocks = x.reshape(*x.shape[:-1], -1, 32)
        return fake_int8_activation(blocks, True, True).reshape(x.shape)
    return fake_int8_activation(x, mode != "tensor", mode == "token_symmetric")


def embedding_tables(model) -> list[dict[str, Any]]:
    """Each embedding table of the trunk quantized int8 per row as both runtimes' recipes would:
    its SQNR (dB, over the whole table), and its largest |value| against its median row RMS."""
    from palkit.export.sqnr import fake_int8_weight
    rows = []
    for name, m in model.trunk.embeddings.named_children():
        if isinstance(m, torch.nn.Embedding):
            w = m.weight.detach().double()
            noise = (w - fake_int8_weight(w)).pow(2).sum()
            peak = w.abs().max()
            rows.append({"table": name, "shape": list(w.shape),
                         "int8_sqnr_db": round(float(10 * torch.log10(w.pow(2).sum() / noise)), 2),
                         "largest": round(float(peak), 4),
                         "largest_channel": int(w.abs().amax(0).argmax()),
                         "median_row_rms": round(float(w.pow(2).mean(1).sqrt().median()), 4)})
    return rows


def recipe_sqnr(model, dev, recipe: tuple[str, str], n: int = 16) -> list[dict[str, Any]]:
    """Each trunk Linear's output SQNR (dB) with its weight and fp32 input quantized as
    `recipe` does, over the first n dev inputs of each task (export/sqnr.py layer_sqnr's method
    with this recipe's quantizers). Worst first."""
    import math

    import torch.nn.functional as F
    from torch import nn

    from palkit.export.programs import reference_outputs
    names = {m: name for name, m in model.named_modules()
             if isinstance(m, nn.Linear) and name.startswith("trunk.")}
    weights = {m: fake_weight(m.weight.detach().float(), recipe[0]) for m in names}
    sums: dict[str, list[float]] = {}

    def hook(module, args, out) -> None:
        noise = out - F.linear(fake_activation(args[0], recipe[1]), weights[module], module.bias)
        s = sums.setdefault(names[module], [0.0, 0.0])
        s[0] += float(out.double().pow(2).sum())
        s[1] += float(noise.double().pow(2).sum())

    handles = [m.register_forward_hook(hook) for m in names]
    try:
        with torch.no_grad():
            for t, (encoded, _) in dev.items():
                for ids, mask, types in encoded[:n]:
                    reference_outputs(model, t, ids, mask, types)
    finally:
        for h in handles:
            h.remove()
    return sorted(({"layer": k, "sqnr_db": round(10 * math.log10(s / max(e, 1e-30)), 2)}
                   for k, (s, e) in sums.items()), key=lambda r: r["sqnr_db"])


def export_onnx(model_dir: Path, out: Path, writer) -> Path:
    """An ONNX Runtime int8 bundle whose trunk.onnx `writer` quantized (no gate: scored apart)."""
    from palkit.quant import onnx_int8
    real = onnx_int8.quantize_trunk
    onnx_int8.quantize_trunk = writer
    try:
        export_run(model_dir, out,
                   ExportOptions(target="onnx", quant="int8", data_dir=None,
                                 gate=Gate(**OFF, max_float_layers=0), overwrite=True),
                   log=lambda *a: None)
    finally:
        onnx_int8.quantize_trunk = real
    return out


def onnx_recipes(model_dir: Path, work: Path, model, splits, refs, timed) -> dict[str, Any]:
    """Every recipe of RECIPES on this model: SQNR, dev and test scores, bytes, latency."""
    rows, bundles = {}, {}
    for i, (name, (writer, replay)) in enumerate(RECIPES.items()):
        bundles[name] = work / f"recipe-{i}"
        saved = work / f"recipe-{i}.json"
        if (REUSE and saved.is_file() and (bundles[name] / MANIFEST_FILE).is_file()
                and json.loads(saved.read_text()).get("recipe") == name):  # RECIPES may change
            rows[name] = json.loads(saved.read_text())
            continue
        print(f"recipe {name}", flush=True)
        export_onnx(model_dir, bundles[name], writer)
        layers = recipe_sqnr(model, splits["dev"], replay)
        rows[name] = {"recipe": name,
                      "sqnr_replayed": {"weights": replay[0], "activations": replay[1]},
                      "worst_layers": layers[:5],
                      "median_sqnr_db": layers[len(layers) // 2]["sqnr_db"],
                      "bytes": sum(p.stat().st_size for p in (bundles[name] / "onnx").rglob("*")
                                   if p.is_file())}
        for split, inputs in splits.items():
            rows[name][split] = summarize_records(
                score(bundles[name], model, inputs, refs[split], ("onnxruntime",))["records"])
        write_json(saved, rows[name])
    ms = latency(bundles, ("onnxruntime",), timed)
    for name in rows:
        rows[name]["latency_ms"] = ms[name]["onnxruntime"]
    return rows


def bundle_bytes(bundle: Path) -> dict[str, int]:
    return {rt: sum(p.stat().st_size for p in (bundle / sub).rglob("*") if p.is_file())
            for rt, sub in (("executorch", "executorch"), ("onnxruntime", "onnx"))}


def false_refusals(model, dev, refs, outputs, seeds: int = 20) -> dict[str, Any]:
    """How often the default gate refuses the plain bundle when only the bootstrap seed, or
    the half of dev it sees, changes."""
    by_seed, by_half = [], []
    rng = random.Random(0)
    for s in range(1, seeds + 1):  # export's own seed is 0
        fails_seed, fails_half = [], []
        for (runtime, t), got in outputs.items():
            encoded, gold = dev[t]
            spec = model.tasks[t]
            r = compare(spec, refs[t], got, gold, "", Gate(seed=s))
            fails_seed += [f for f in [failure(r, f"{runtime}/{t}", True, Gate())] if f]
            half = sorted(rng.sample(range(len(gold)), len(gold) // 2))
            h = compare(spec, refs[t][half], got[half], [gold[i] for i in half], "", Gate())
            fails_half += [f for f in [failure(h, f"{runtime}/{t}", True, Gate())] if f]
        by_seed.append(fails_seed)
        by_half.append(fails_half)
    runtimes = sorted({rt for rt, _ in outputs})
    return {"seeds": seeds, "refused_with_other_seed": sum(bool(f) for f in by_seed),
            "refused_on_half_of_dev": sum(bool(f) for f in by_half),
            "by_runtime": {rt: {"seed": sum(any(f.startswith(rt + "/") for f in fs)
                                            for fs in by_seed),
                                "half": sum(any(f.startswith(rt + "/") for f in fs)
                                            for fs in by_half)} for rt in runtimes},
            "failures_seed": [f for fs in by_seed for f in fs][:10],
            "failures_half": [f for fs in by_half for f in fs][:10]}


def summarize_records(records: dict[str, Any]) -> dict[str, Any]:
    keep = ("examples", "metric", "metric_change", "metric_change_interval", "agreement",
            "agreement_interval", "flips", "kl_mean", "kl_p99", "max_abs_diff",
            "metrics_pytorch_fp32", "metrics_bundle")
    return {k: {f: r[f] for f in keep if f in r} for k, r in records.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model_dir", type=Path)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--data-dir", help="the task data (default: as `palkit train`'s)")
    p.add_argument("--keep", type=int, default=2)
    p.add_argument("--steps", type=int, required=True, help="training steps of the model")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--reuse", action="store_true", help="read back what an earlier run wrote")
    p.add_argument("--recipes-only", action="store_true",
                   help="only step 1 (printed, not written to --results)")
    a = p.parse_args()
    a.data_dir = resolve_data_dir(a.data_dir)
    global REUSE
    REUSE = a.reuse
    a.work.mkdir(parents=True, exist_ok=True)
    # ExecuTorch's thread pool is sized once per process, before a program loads: one thread for
    # everything here (export's verification included), as the timings need
    set_executorch_threads(1)
    model, tokenizer, _ = load_model(a.model_dir)
    out: dict[str, Any] = {"model": str(a.model_dir), "training_steps": a.steps,
                           "machine": machine(), "date": time.strftime("%Y-%m-%d"),
                           "command": "python -m lab.int8_gate " + " ".join(sys.argv[1:])}
    out["embedding_tables"] = embedding_tables(model)
    splits, refs = references(model, tokenizer, a.data_dir, a.work)
    timed = timed_input(tokenizer, splits["dev"])
    out["onnx_recipes"] = onnx_recipes(a.model_dir, a.work, model, splits, refs, timed)
    if a.recipes_only:
        print(markdown_recipes(out["onnx_recipes"]))
        return
    a.results.mkdir(exist_ok=True)
    write_json(a.results / "int8-gate.json", out)  # step 1 on its own until the rest is done
    write_text(a.results / "int8-gate.md", markdown(out))

    lines: list[str] = []
    default = export(a.model_dir, a.work / "default", a.data_dir, Gate(), lines)
    report = default["report"]
    out["default_export"] = {
        "seconds": default["seconds"], "passed": report["passed"], "failures": report["failures"],
        "fallback": report.get("fallback", {}), "log": lines,
        "gate": summarize_records({f"{rt}/{t}": r for rt, s in report["runtimes"].items()
                                   for t, r in s["tasks"].items()}),
        "layers": {rt: rows for rt, rows in report.get("layers", {}).items()}}
    fell_back = {rt: fb["float_layers"] for rt, fb in report.get("fallback", {}).items()}

    if fell_back and report["passed"]:
        plain = a.work / "plain"
        export(a.model_dir, plain, a.data_dir, Gate(**OFF, max_float_layers=0), [])
        kept, kept_dir = fell_back, a.work / "default"
    else:
        plain = a.work / "default" if report["passed"] else a.work / "plain"
        if not report["passed"]:
            export(a.model_dir, plain, a.data_dir, Gate(**OFF, max_float_layers=0), [])
        layers = report["layers"]
        kept = {rt: [r["layer"] for r in layers[rt]
                     if r["layer"].startswith("trunk.") and r["kind"] == "linear"][:a.keep]
                for rt in ("executorch", "onnxruntime")}
        kept_dir = a.work / "float"
        export(a.model_dir, kept_dir, a.data_dir, Gate(**OFF, max_float_layers=0,
                                                       keep_float=kept), [])
    out["float_layers"] = kept
    for split, inputs in splits.items():
        for name, bundle in (("plain", plain), ("float", kept_dir)):
            s = score(bundle, model, inputs, refs[split])
            out.setdefault("scores", {}).setdefault(name, {})[split] = \
                summarize_records(s["records"])
            if name == "plain" and split == "dev":
                out["false_refusals"] = false_refusals(model, inputs, refs[split], s["outputs"])
    out["latency_ms"] = latency({"plain": plain, "float": kept_dir},
                                ("executorch", "onnxruntime"), timed)
    out["bytes"] = {"plain": bundle_bytes(plain), "float": bundle_bytes(kept_dir)}
    write_json(a.results / "int8-gate.json", out)
    write_text(a.results / "int8-gate.md", markdown(out))


def references(model, tokenizer, data: Path, work: Path):
    """Dev and test inputs of every task and PyTorch fp32's outputs for them (kept in `work`
    for --reuse)."""
    from palkit.export.bundle import default_max_len
    max_len = default_max_len(model)
    splits = {split: split_inputs(model, tokenizer, data, split, max_len)
              for split in ("dev", "test")}
    saved = work / "references.pt"
    if REUSE and saved.is_file():
        return splits, torch.load(saved)
    refs = {split: {t: reference_batched(model, t, enc) for t, (enc, _) in inputs.items()}
            for split, inputs in splits.items()}
    torch.save(refs, saved)
    return splits, refs


def markdown_recipes(rows: dict[str, Any]) -> str:
    """The recipes' comparison: one row per recipe and split, and their worst layers."""
    lines = ["| recipe | MiB | ms | median / worst SQNR dB | split | " +
             " | ".join(f"{t} change [interval], agreement" for t in TASK_ORDER) + " |",
             "|---|---:|---:|---|---|" + "---|" * len(TASK_ORDER)]
    for name, r in rows.items():
        for split in ("dev", "test"):
            cells = []
            for t in TASK_ORDER:
                x = r[split][f"onnxruntime/{t}"]
                lo, hi = x["metric_change_interval"]
                cells.append(f"{x['metric_change']:+.2f} [{lo:+.2f}, {hi:+.2f}], "
                             f"{x['agreement']:.4f}")
            head = (f"{name} | {r['bytes'] / 2**20:.1f} | {r['latency_ms']:.2f} | "
                    f"{r['median_sqnr_db']:.1f} / {r['worst_layers'][0]['sqnr_db']:.1f}"
                    if split == "dev" else " | | | ")
            lines.append(f"| {head} | {split} | " + " | ".join(cells) + " |")
    lines += ["", "KL(fp32 || int8) of the outputs, mean over dev (x 1e-4; flips are whole "
              "examples, KL moves with every output):", "",
              "| recipe | " + " | ".join(TASK_ORDER) + " |", "|---|" + "---:|" * len(TASK_ORDER)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{r['dev'][f'onnxruntime/{t}']['kl_mean'] * 1e4:.2f}" for t in TASK_ORDER) + " |")
    return "\n".join(lines)


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# The int8 gate on a trained model ({r['training_steps']} steps)", "",
             f"Model `{r['model']}`; {r['machine']}; {r['date']}. "
             f"Command: `{r['command']}`.", "",
             "## ONNX Runtime int8 recipes", "",
             f"Change of each task's metric against PyTorch fp32 (points, 95% paired-bootstrap "
             f"interval) and prediction agreement; MiB: the onnx/ folder; ms: one {TIMED_TASK} "
             f"call of {LATENCY_TOKENS} tokens on 1 thread (fastest of {ROUNDS} alternating "
             f"rounds of {LATENCY_CALLS}); SQNR: each trunk Linear's output with the recipe "
             "replayed on fp32 inputs (16 dev inputs per task).", "",
             markdown_recipes(r["onnx_recipes"]), ""]
    if "default_export" not in r:
        return "\n".join(lines)
    lines += ["## Default export", "",
             f"Passed: {r['default_export']['passed']} in {r['default_export']['seconds']:.0f} s "
             "(whole export: lowering, writing and verification)."]
    for f in r["default_export"]["failures"]:
        lines.append(f"- refused: {f}")
    for rt, fb in r["default_export"]["fallback"].items():
        lines.append(f"- fallback on {rt}: kept {', '.join(fb['float_layers'])} in float; "
                     f"bytes x{fb['bytes_ratio']:.3f}")
    lines += ["", "Verification steps (from export's log):", ""]
    lines += [f"    {x}" for x in r["default_export"]["log"] if "verif" in x or "SQNR" in x
              or "reference" in x or "keeping" in x]
    lines += ["", "## Embedding tables int8 per row (palkit keeps only the word table int8)", "",
              "| table | shape | int8 SQNR dB | largest abs (channel) | median row RMS |",
              "|---|---|---:|---|---:|"]
    lines += [f"| {t['table']} | {t['shape'][0]} x {t['shape'][1]} | {t['int8_sqnr_db']:.1f} | "
              f"{t['largest']:.3f} ({t['largest_channel']}) | {t['median_row_rms']:.3f} |"
              for t in r["embedding_tables"]]
    lines += ["", "## Worst layers by output SQNR (dB), fp32 inputs from dev", "",
              "| executorch layer | dB | onnxruntime layer | dB |", "|---|---:|---|---:|"]
    et, ort = (r["default_export"]["layers"].get(k, []) for k in ("executorch", "onnxruntime"))
    for a, b in zip(et[:10], ort[:10]):
        lines.append(f"| {a['layer']} | {a['sqnr_db']:.1f} | {b['layer']} | {b['sqnr_db']:.1f} |")
    lines += ["", "## Metric change against PyTorch fp32 (points, 95% paired-bootstrap interval)",
              "", f"float: {json.dumps(r['float_layers'])}", "",
              "| bundle | split | runtime/task | change | interval | agreement | flips +/- | "
              "KL mean | KL p99 |", "|---|---|---|---:|---|---:|---|---:|---:|"]
    for name, splits in r["scores"].items():
        for split, recs in splits.items():
            for key, x in recs.items():
                lo, hi = x["metric_change_interval"]
                flips = x.get("flips")
                fl = f"+{flips['gained']}/-{flips['lost']}" if flips else "-"
                lines.append(f"| {name} | {split} | {key} | {x['metric_change']:+.2f} | "
                             f"[{lo:+.2f}, {hi:+.2f}] | {x['agreement']:.4f} | {fl} | "
                             f"{x['kl_mean']:.2e} | {x['kl_p99']:.2e} |")
    lines += ["", f"## Cost of the float layers (one {TIMED_TASK} call, {LATENCY_TOKENS} tokens, "
              "1 thread)", "", "| runtime | plain ms | float ms | latency | plain MiB | "
              "float MiB | bytes |", "|---|---:|---:|---:|---:|---:|---:|"]
    for rt in ("executorch", "onnxruntime"):
        ms0, ms1 = r["latency_ms"]["plain"][rt], r["latency_ms"]["float"][rt]
        b0, b1 = r["bytes"]["plain"][rt], r["bytes"]["float"][rt]
        lines.append(f"| {rt} | {ms0:.2f} | {ms1:.2f} | x{ms1 / ms0:.3f} | {b0 / 2**20:.2f} | "
                     f"{b1 / 2**20:.2f} | x{b1 / b0:.3f} |")
    fr = r["false_refusals"]
    lines += ["", "## False refusals of the plain bundle", "",
              f"Refused with {fr['refused_with_other_seed']} of {fr['seeds']} other bootstrap "
              f"seeds, and on {fr['refused_on_half_of_dev']} of {fr['seeds']} random halves "
              "of dev."]
    for rt, n in fr["by_runtime"].items():
        lines.append(f"- {rt}: refused with {n['seed']} of {fr['seeds']} seeds, on {n['half']} "
                     f"of {fr['seeds']} halves")
    lines += ["", "The refusals (at most 10 of each kind):", ""]
    lines += [f"- {f}" for f in fr["failures_seed"] + fr["failures_half"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
