"""The int8 gate on a trained model: results/int8-gate.json and .md.

    python -m studies.int8_gate MODEL_DIR --work DIR [--data-dir DIR] [--keep 2]

1. `palkit export` with the default gate (every runtime, every task, all of dev): the gate's
   records, the per-layer SQNR, the fallback if it ran, and how long verification took.
2. The same model with every Linear int8 ("plain", the default bundle when no fallback ran) and
   with the `--keep` worst layers by SQNR kept in float ("float-k", the fallback's bundle when it
   ran): metric changes against PyTorch fp32 on dev and test with their 95% intervals, flips,
   KL, bytes, and one-task latency (mean ms per dev example, the runtimes' default threads, the
   two bundles run in alternation in one process).
3. False refusals: the plain bundle's dev outputs gated again with 20 bootstrap seeds and on 20
   random halves of dev.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from export.bundle import export_run
from export.runtime import Engine, load_bundle
from export.verify import Gate, compare, drop_bound, failure, reference_batched, run_task
from trainer.checkpoint import load_model
from trainer.data import read_examples
from trainer.fileio import write_json, write_text

OFF = dict(max_drop=None, min_agreement=0.0)
REUSE = False
LATENCY_EXAMPLES = 200
ROUNDS = 3


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
        export_run(model_dir, out, target="android", quant="int8", data_dir=data, gate=gate,
                   overwrite=True, log=log)
        report = json.loads((out / "verify.json").read_text())
    except Exception as e:  # a refusal: its report lies beside the target
        log(f"refused: {e}")
        report = json.loads(refused.read_text())
    write_json(saved, {"lines": lines, "seconds": time.time() - t0})
    return {"seconds": time.time() - t0, "report": report}


def split_inputs(model, tokenizer, data: Path, split: str, max_len: int):
    from export.verify import encode_texts
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
        engine = Engine(load_bundle(bundle), runtime)
        for t, (encoded, gold) in inputs.items():
            got, _ = run_task(engine, t, encoded)
            outputs[(runtime, t)] = got
            rows[f"{runtime}/{t}"] = compare(model.tasks[t], refs[t], got, gold, "study")
    return {"records": rows, "outputs": outputs}


def latency(bundles: dict[str, Path], inputs) -> dict[str, dict[str, float]]:
    """Mean ms per call over the first dev examples of each task; the bundles run
    in alternation, ROUNDS times, and each keeps its fastest round."""
    best: dict[str, dict[str, float]] = {}
    engines = {(name, rt): Engine(load_bundle(path), rt)
               for name, path in bundles.items() for rt in ("executorch", "onnxruntime")}
    for _ in range(ROUNDS):
        for (name, rt), engine in engines.items():
            for t, (encoded, _) in inputs.items():
                _, ms = run_task(engine, t, encoded[:LATENCY_EXAMPLES])
                key = f"{rt}/{t}"
                best.setdefault(name, {})[key] = min(best.get(name, {}).get(key, 1e9), ms)
    return best


def float_embeddings_onnx(model_dir: Path, out: Path, data: Path) -> Path:
    """The ONNX Runtime bundle with the embedding tables left in float (quantize_dynamic
    quantizes Gather by default): only MatMul/Gemm quantized."""
    import onnxruntime.quantization as q

    real = q.quantize_dynamic

    def matmuls_only(*args, **kwargs):
        return real(*args, op_types_to_quantize=["MatMul", "Gemm"], **kwargs)

    q.quantize_dynamic = matmuls_only
    try:
        export_run(model_dir, out, target="onnx", quant="int8", data_dir=data,
                   gate=Gate(**OFF, max_float_layers=0), overwrite=True, log=lambda *a: None)
    finally:
        q.quantize_dynamic = real
    return out


def bundle_bytes(bundle: Path) -> dict[str, int]:
    return {rt: sum(p.stat().st_size for p in (bundle / sub).rglob("*") if p.is_file())
            for rt, sub in (("executorch", "executorch"), ("onnxruntime", "onnx"))}


def false_refusals(model, dev, refs, outputs, seeds: int = 20) -> dict[str, Any]:
    """How often the default gate refuses the plain bundle when only the bootstrap seed, or
    the half of dev it sees, changes."""
    by_seed, by_half = [], []
    rng = random.Random(0)
    for s in range(seeds):
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
    return {"seeds": seeds, "refused_with_other_seed": sum(bool(f) for f in by_seed),
            "refused_on_half_of_dev": sum(bool(f) for f in by_half),
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
    p.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    p.add_argument("--keep", type=int, default=2)
    p.add_argument("--steps", type=int, required=True, help="training steps of the model")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--reuse", action="store_true", help="read back bundles an earlier run wrote")
    a = p.parse_args()
    global REUSE
    REUSE = a.reuse
    a.work.mkdir(parents=True, exist_ok=True)
    model, tokenizer, _ = load_model(a.model_dir)
    out: dict[str, Any] = {"model": str(a.model_dir), "training_steps": a.steps,
                           "machine": machine(), "date": time.strftime("%Y-%m-%d"),
                           "command": "python -m studies.int8_gate " + str(a.model_dir)}

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
        kept = {"executorch": [r["layer"] for r in layers["executorch"][:a.keep]],
                "onnxruntime": [r["layer"] for r in layers["onnxruntime"]
                                if r["layer"].startswith("trunk.")][:a.keep]}
        kept_dir = a.work / "float"
        export(a.model_dir, kept_dir, a.data_dir, Gate(**OFF, max_float_layers=0,
                                                       keep_float=kept), [])
    out["float_layers"] = kept
    max_len = load_bundle(plain).manifest.tokenizer.max_length
    for split in ("dev", "test"):
        inputs = split_inputs(model, tokenizer, a.data_dir, split, max_len)
        refs = {t: reference_batched(model, t, enc) for t, (enc, _) in inputs.items()}
        for name, bundle in (("plain", plain), ("float", kept_dir)):
            s = score(bundle, model, inputs, refs)
            out.setdefault("scores", {}).setdefault(name, {})[split] = \
                summarize_records(s["records"])
            if name == "plain" and split == "dev":
                out["false_refusals"] = false_refusals(model, inputs, refs, s["outputs"])
        if split == "dev":
            out["latency_ms"] = latency({"plain": plain, "float": kept_dir}, inputs)
            emb = float_embeddings_onnx(a.model_dir, a.work / "onnx-float-embeddings", a.data_dir)
            out["onnx_float_embeddings"] = {
                "dev": summarize_records(score(emb, model, inputs, refs, ("onnxruntime",))[
                    "records"]),
                "bytes": sum(p.stat().st_size for p in (emb / "onnx").rglob("*") if p.is_file())}
    out["bytes"] = {"plain": bundle_bytes(plain), "float": bundle_bytes(kept_dir)}
    a.results.mkdir(exist_ok=True)
    write_json(a.results / "int8-gate.json", out)
    write_text(a.results / "int8-gate.md", markdown(out))


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# The int8 gate on a trained model ({r['training_steps']} steps)", "",
             f"Model `{r['model']}`; {r['machine']}; {r['date']}. "
             f"Command: `{r['command']}`.", "",
             "## Default export", "",
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
    lines += ["", "## Cost of the float layers", "", "| runtime/task | plain ms | float ms | ratio |",
              "|---|---:|---:|---:|"]
    for key, ms in r["latency_ms"]["plain"].items():
        f = r["latency_ms"]["float"][key]
        lines.append(f"| {key} | {ms:.2f} | {f:.2f} | {f / ms:.3f} |")
    for rt in ("executorch", "onnxruntime"):
        b0, b1 = r["bytes"]["plain"][rt], r["bytes"]["float"][rt]
        lines.append(f"\n{rt} files: {b0 / 2**20:.2f} MiB plain, {b1 / 2**20:.2f} MiB float "
                     f"(x{b1 / b0:.3f})")
    emb = r["onnx_float_embeddings"]
    lines += ["", "## ONNX Runtime with float embedding tables (Gather not quantized), dev", "",
              f"onnx files {emb['bytes'] / 2**20:.2f} MiB"]
    for key, x in emb["dev"].items():
        lo, hi = x["metric_change_interval"]
        lines.append(f"- {key}: change {x['metric_change']:+.2f} [{lo:+.2f}, {hi:+.2f}], "
                     f"agreement {x['agreement']:.4f}, KL mean {x['kl_mean']:.2e}")
    fr = r["false_refusals"]
    lines += ["", "## False refusals of the plain bundle", "",
              f"Refused with {fr['refused_with_other_seed']} of {fr['seeds']} other bootstrap "
              f"seeds, and on {fr['refused_on_half_of_dev']} of {fr['seeds']} random halves "
              "of dev."]
    lines += [f"- {f}" for f in fr["failures_seed"] + fr["failures_half"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
