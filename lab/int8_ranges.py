"""ONNX Runtime's int8 integer ranges on a trained model: results/int8-ranges.{json,md}.

    python -m lab.int8_ranges RUN --work DIR [--data-dir DIR] [--haswell-examples N]
    python -m lab.int8_ranges RUN --work DIR --timing results/int8-ranges-timing.json

x86 without VNNI saturates a pair of uint8 x int8 products beyond 32,767 (quant/weights.py's
ProductRanges). For each candidate range in CANDIDATES (full ranges, 7-bit activations, 7-bit
weights, a balanced split, neighbouring weights' pairs bounded; only the first can saturate):
1. an ONNX Runtime int8 bundle of RUN (no gate), its outputs on every task's whole dev split
   against PyTorch fp32 (argmax agreement, metric change with its interval), its bytes, and
   one-task latency, the bundles in alternation in one process (lab/int8_gate.py's method);
2. ExecuTorch's int8 on the same run and CPU beside them (its default export, no gate);
3. the first and last ONNX Runtime bundles (palkit's ranges before and now) again on the same
   token ids under `qemu-x86_64-static -cpu Haswell`
   (AVX2, no VNNI) through palkit's own runtime layer (runtime/score_worker.py), on a stratified
   sample of N dev examples a task: agreement with this host and the largest logit difference.
This host's CPU flags say whether it has VNNI (on a host without, step 1 is the AVX2 figure).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

import lab.int8_gate as gate_lab
from palkit.core.fileio import write_json, write_text
from palkit.core.host import cpu_model, int8_features
from palkit.core.options import resolve_data_dir
from palkit.export.arch_check import host_python_under_qemu, stratified_sample, worker_logits
from palkit.export.bundle import export_run
from palkit.export.gate import Gate
from palkit.export.gate_stats import compare
from palkit.export.options import ExportOptions
from palkit.export.verify import reference_batched
from palkit.quant import onnx_int8
from palkit.quant.weights import ProductRanges
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.runners import set_executorch_threads
from palkit.trainer.checkpoint import load_model, resolve_model_dir

CANDIDATES = {
    "8-bit activations, 8-bit weights (palkit before)": ProductRanges(255, 127),
    "7-bit activations (0..127), 8-bit weights": ProductRanges(127, 127),
    "8-bit activations, 7-bit weights (-64..64)": ProductRanges(255, 64),
    "balanced: activations 0..181, weights -90..90": ProductRanges(181, 90),
    "8-bit activations, 8-bit weights, |w[2j]| + |w[2j+1]| <= 128 (palkit now)":
        ProductRanges(255, 127, 128),
}
OFF = Gate(max_drop=None, min_agreement=-1.0, max_float_layers=0)


def export_ranges(model_dir: Path, out: Path, ranges: ProductRanges) -> Path:
    """An ONNX Runtime int8 bundle whose trunk and adapters use `ranges` (no gate)."""
    real = onnx_int8.RANGES
    onnx_int8.RANGES = ranges
    try:
        export_run(model_dir, out,
                   ExportOptions(target="onnx", quant="int8", data_dir=None, gate=OFF,
                                 overwrite=True),
                   log=lambda *a: None)
    finally:
        onnx_int8.RANGES = real
    return out


def kernel_session(u8u8: bool, m: int = 128, k: int = 384, n: int = 1536) -> Any:
    """An ONNX Runtime session of one MatMulIntegerToFloat at MiniLM's feed-forward shape: uint8
    activations times int8 weights (U8S8, palkit's), or times uint8 weights with zero point 128
    (U8U8: exact on x86 without VNNI too, by 16-bit multiplies)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = np.random.default_rng(0).integers(-127, 128, (k, n)).astype(np.int8)
    inits = [nh.from_array(np.full(n, 0.01, np.float32), "bs")]
    if u8u8:
        inits += [nh.from_array((w.astype(np.int16) + 128).astype(np.uint8), "w"),
                  nh.from_array(np.array(128, np.uint8), "wz")]
        node = h.make_node("MatMulIntegerToFloat", ["a", "w", "as", "bs", "", "wz"], ["y"],
                           domain="com.microsoft")
    else:
        inits.append(nh.from_array(w, "w"))
        node = h.make_node("MatMulIntegerToFloat", ["a", "w", "as", "bs"], ["y"],
                           domain="com.microsoft")
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("a", T.UINT8, [m, k]),
                                       h.make_tensor_value_info("as", T.FLOAT, [m, 1])],
                         [h.make_tensor_value_info("y", T.FLOAT, [m, n])], inits)
    model = h.make_model(graph, ir_version=9, opset_imports=[h.make_opsetid("", 17),
                                                              h.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def u8u8_cost(rounds: int = 15, calls: int = 50) -> dict[str, float]:
    """U8S8 against U8U8 on this host: ms per call, each kernel's fastest round, in alternation."""
    import numpy as np
    rng = np.random.default_rng(1)
    feed = {"a": rng.integers(0, 256, (128, 384)).astype(np.uint8),
            "as": np.full((128, 1), 0.02, np.float32)}
    sessions = {"u8s8": kernel_session(False), "u8u8": kernel_session(True)}
    best = {name: float("inf") for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                session.run(None, feed)
            best[name] = min(best[name], (time.perf_counter() - t0) / calls * 1000)
    return {**{f"{k}_ms": round(v, 4) for k, v in best.items()},
            "u8u8_over_u8s8": round(best["u8u8"] / best["u8s8"], 3)}


def paired_latency(before: Path, now: Path, tokenizer, dev, rounds: int = 30,
                   calls: int = 20) -> dict[str, Any]:
    """One-task ONNX Runtime latency of two bundles in alternation (the order swapped every
    round, so neither always runs first): ms per call of each round, and the median of the
    per-round ratios now / before, which machine drift cancels out of."""
    import statistics
    timed = gate_lab.timed_input(tokenizer, dev)
    engines = {"before": Engine(load_bundle(before), "onnxruntime", threads=1),
               "now": Engine(load_bundle(now), "onnxruntime", threads=1)}
    for engine in engines.values():
        engine.run_ids(gate_lab.TIMED_TASK, *timed)  # warm-up
    ms: dict[str, list[float]] = {"before": [], "now": []}
    for r in range(rounds):
        for name in (("before", "now") if r % 2 == 0 else ("now", "before")):
            total = sum(engines[name].run_ids(gate_lab.TIMED_TASK, *timed)[1] for _ in range(calls))
            ms[name].append(total / calls)
    ratios = [n / b for n, b in zip(ms["now"], ms["before"])]
    return {"rounds": rounds, "calls_per_round": calls,
            "median_ms": {k: round(statistics.median(v), 3) for k, v in ms.items()},
            "median_ratio_now_over_before": round(statistics.median(ratios), 4),
            "ratio_quartiles": [round(q, 4) for q in statistics.quantiles(ratios, n=4)]}


def summarize(records: dict[str, Any]) -> dict[str, Any]:
    keep = ("metric", "metric_change", "metric_change_interval", "agreement", "flips",
            "max_abs_diff")
    return {k: {f: r.get(f) for f in keep} for k, r in records.items()}


def haswell(bundle: Path, model, dev, host_outputs, n: int) -> dict[str, Any]:
    """The bundle's ONNX Runtime outputs under qemu Haswell against this host's."""
    rows = {}
    for t, (encoded, gold) in dev.items():
        chosen = stratified_sample(gold, n, model.tasks[t].is_regression)
        t0 = time.time()
        got = worker_logits(*host_python_under_qemu("Haswell"), bundle, "onnxruntime", t,
                            [encoded[i] for i in chosen])
        host = host_outputs[("onnxruntime", t)][chosen]
        r = compare(model.tasks[t], host, got, None, f"{len(chosen)} dev (stratified)", OFF)
        rows[t] = {"examples": len(chosen), "agreement_with_host": r["agreement"],
                   "max_abs_diff_from_host": float((got - host).abs().max()),
                   "identical": bool(torch.equal(got, host)), "seconds": round(time.time() - t0)}
        print(f"  haswell {t}: {rows[t]}", flush=True)
    return rows


def table(result: dict[str, Any]) -> str:
    tasks = list(result["executorch"]["dev"])
    head = ("| ranges | pair max | exact without VNNI | MiB | ms | "
            + " | ".join(f"{t} agreement | {t} change" for t in tasks) + " | Haswell agreement |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def cells(dev: dict[str, Any]) -> str:
        return " | ".join(f"{dev[t]['agreement']:.4f} | {dev[t]['metric_change']:+.2f}"
                          for t in tasks)

    for name, row in result["onnxruntime"].items():
        hw = row.get("haswell") or {}
        agree = ", ".join(f"{t} {v['agreement_with_host']:.3f}" for t, v in hw.items()) or "-"
        exact = "yes" if row["exact_without_vnni"] else "**no**"
        lines.append(f"| {name.replace('|', '&#124;')} | {row['pair_max']:,} | {exact} "
                     f"| {row['bytes'] / 2**20:.1f} | {row['latency_ms']:.2f} "
                     f"| {cells(row['dev'])} | {agree} |")
    et = result["executorch"]
    lines.append(f"| ExecuTorch (XNNPACK qd8 x qc8w) | - | yes | {et['bytes'] / 2**20:.1f} | - | "
                 f"{cells(et['dev'])} | - |")
    return "\n".join(lines)


def timing(a: argparse.Namespace) -> None:
    """The --timing record: paired one-task latency of the first and last candidates' bundles
    (written earlier into --work) and the U8U8 kernel's cost."""
    model, tokenizer, _ = load_model(resolve_model_dir(a.run))
    max_len = load_bundle(a.work / "executorch").manifest.tokenizer.max_length
    dev = gate_lab.split_inputs(model, tokenizer, resolve_data_dir(a.data_dir), "dev", max_len)
    names = list(CANDIDATES)
    record = {"command": f"python -m lab.int8_ranges {a.run} --work {a.work} --timing {a.timing}",
              "machine": f"{cpu_model()} ({int8_features()})",
              "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "latency": {"before": names[0], "now": names[-1], "task": gate_lab.TIMED_TASK,
                          "tokens": gate_lab.LATENCY_TOKENS, "threads": 1,
                          **paired_latency(a.work / "ranges-0",
                                           a.work / f"ranges-{len(names) - 1}", tokenizer, dev)},
              "u8u8_kernel": {"shape": "128x384 by 384x1536, 1 thread", **u8u8_cost()}}
    write_json(a.timing, record)
    lat, kernel = record["latency"], record["u8u8_kernel"]
    write_text(a.timing.with_suffix(".md"), f"# ONNX Runtime int8 ranges: timing\n\n"
               f"`{record['command']}`, {record['date']}, on {record['machine']}.\n\n"
               f"- One {lat['task']} call, {lat['tokens']} tokens, 1 thread, "
               f"{lat['rounds']} rounds "
               f"of {lat['calls_per_round']} calls, the order swapped each round: palkit's ranges "
               f"now {lat['median_ms']['now']} ms, before {lat['median_ms']['before']} ms; median "
               f"per-round ratio now / before **{lat['median_ratio_now_over_before']:.3f}** "
               f"(quartiles {lat['ratio_quartiles'][0]:.3f}-{lat['ratio_quartiles'][2]:.3f}).\n"
               f"- The exact alternative, uint8 weights (U8U8, 16-bit multiplies), at MiniLM's "
               f"feed-forward shape ({kernel['shape']}): {kernel['u8u8_ms']} ms against U8S8's "
               f"{kernel['u8s8_ms']} ms, **{kernel['u8u8_over_u8s8']:.2f}x**.\n")
    print(a.timing.with_suffix(".md").read_text())


def write_markdown(result: dict[str, Any], path: Path) -> None:
    examples = next(iter(next(r["haswell"] for r in result["onnxruntime"].values()
                               if "haswell" in r).values()))["examples"]
    write_text(path, f"# ONNX Runtime's int8 integer ranges\n\n`{result['command']}`, "
               f"{result['date']}, on {result['machine']}. Whole dev split against PyTorch fp32; "
               f"ms: one task, {gate_lab.LATENCY_TOKENS} tokens, 1 thread, the bundles in "
               f"alternation, each its fastest round (paired timing of the first and last: "
               f"int8-ranges-timing.md); Haswell: qemu-x86_64-static -cpu Haswell on {examples} "
               f"stratified dev examples a task, agreement with this host.\n\n{table(result)}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, nargs="?")
    p.add_argument("--work", type=Path)
    p.add_argument("--timing", type=Path, metavar="FILE.json",
                   help="instead: time the bundles of palkit's ranges before and now in WORK "
                   "(paired_latency) and U8S8 against U8U8 (u8u8_cost) into FILE.json and .md")
    p.add_argument("--render", type=Path, metavar="FILE.json",
                   help="instead: write FILE.md again from the record FILE.json")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--haswell-examples", type=int, default=100)
    p.add_argument("--out", type=Path, default=Path("results/int8-ranges"))
    a = p.parse_args()
    if a.timing:
        timing(a)
        return
    if a.render:  # the Markdown again from a written record
        write_markdown(json.loads(a.render.read_text()), a.render.with_suffix(".md"))
        return
    torch.manual_seed(0)
    set_executorch_threads(1)  # export's verification and the scoring below share one setting
    data = resolve_data_dir(a.data_dir)
    model_dir = resolve_model_dir(a.run)
    model, tokenizer, _ = load_model(model_dir)
    a.work.mkdir(parents=True, exist_ok=True)
    print("ExecuTorch int8", flush=True)
    et = a.work / "executorch"
    export_run(model_dir, et,
               ExportOptions(target="executorch", quant="int8", data_dir=None, gate=OFF,
                             overwrite=True),
               log=lambda *x: None)
    max_len = load_bundle(et).manifest.tokenizer.max_length
    dev = gate_lab.split_inputs(model, tokenizer, data, "dev", max_len)
    refs = {t: reference_batched(model, t, enc) for t, (enc, _) in dev.items()}
    result: dict[str, Any] = {"command": "python -m lab.int8_ranges " + " ".join(
        str(x) for x in [a.run, "--work", a.work, "--haswell-examples", a.haswell_examples]),
        "machine": f"{cpu_model()} ({int8_features()})",
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "onnxruntime": {}}

    scored = gate_lab.score(et, model, dev, refs, ("executorch",))
    result["executorch"] = {"bytes": gate_lab.bundle_bytes(et)["executorch"],
                            "dev": {t: summarize(scored["records"])[f"executorch/{t}"]
                                    for t in dev}}

    bundles, outputs = {}, {}
    for i, (name, ranges) in enumerate(CANDIDATES.items()):
        print(f"{name}", flush=True)
        bundles[name] = export_ranges(model_dir, a.work / f"ranges-{i}", ranges)
        scored = gate_lab.score(bundles[name], model, dev, refs, ("onnxruntime",))
        outputs[name] = scored["outputs"]
        result["onnxruntime"][name] = {
            "activation_steps": ranges.activation_steps, "weight_max": ranges.weight_max,
            "pair_max": ranges.largest_pair_product,
            "exact_without_vnni": ranges.exact_without_vnni,
            "bytes": gate_lab.bundle_bytes(bundles[name])["onnxruntime"],
            "dev": {t: summarize(scored["records"])[f"onnxruntime/{t}"] for t in dev}}
        write_json(a.work / "partial.json", result)
    ms = gate_lab.latency(bundles, ("onnxruntime",), gate_lab.timed_input(tokenizer, dev))
    for name in bundles:
        result["onnxruntime"][name]["latency_ms"] = round(ms[name]["onnxruntime"], 3)

    if a.haswell_examples:  # slow under qemu: palkit's ranges before and now
        for name, bundle in [list(bundles.items())[0], list(bundles.items())[-1]]:
            print(f"Haswell: {name}", flush=True)
            result["onnxruntime"][name]["haswell"] = haswell(bundle, model, dev, outputs[name],
                                                             a.haswell_examples)
            write_json(a.work / "partial.json", result)
    write_json(a.out.with_suffix(".json"), result)
    write_markdown(result, a.out.with_suffix(".md"))
    print(table(result))


if __name__ == "__main__":
    main()
