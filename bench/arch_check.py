"""The int8 check on the phone's arithmetic: a bundle's ExecuTorch tasks through the Android
app's own native path built for another architecture (aarch64, run under qemu on a pinned CPU
model: android_demo/host/native_host.py), against the host's int8 and the fp32 model.

Export's gate judges int8 on the host's kernels; a phone's XNNPACK kernels quantize and
accumulate differently (docs: /android_demo/README.md, "ARM64"). Per task, on a stratified sample
of the dev split, the same token ids (encoded once in Python: only the arithmetic is compared)
go through the bundle on both sides and the fp32 model; export/verify.py's `compare` gives the
record's `vs_host_int8`, `vs_fp32` (judged by the gate) and `host_int8_vs_fp32` (the host's own
change, to set beside it), kept in the bundle's verify.json under `architectures.<arch>`.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from bench.native import native_host
from export.manifest import VERIFY_FILE
from export.runtime import Engine, load_bundle
from export.verify import (CONFIDENCE, Encoded, Gate, compare, encode_texts, failure,
                           reference_batched, run_task)
from trainer.checkpoint import load_model, read_json, resolve_model_dir
from trainer.data import read_examples
from trainer.errors import PalkitError
from trainer.fileio import write_json

Log = Callable[[str], None]
SECTION = "architectures"
STRATA = 10                     # score bins of a regression task's sample
SEED = 0
JVM_TIMEOUT_S = 3600.0


class ArchCheckError(PalkitError):
    """The check cannot run here or on this bundle (says what to do)."""


def stratified_sample(gold: list[float], n: int | None, regression: bool,
                      seed: int = SEED) -> list[int]:
    """Sorted indices of n of the examples (all when n is None or not smaller), each label (or
    each of STRATA score bins) keeping its share of the split, largest remainders rounded up."""
    if n is None or n >= len(gold):
        return list(range(len(gold)))
    if regression:
        rank = sorted(range(len(gold)), key=lambda i: gold[i])
        key = {i: r * STRATA // len(gold) for r, i in enumerate(rank)}
    else:
        key = {i: gold[i] for i in range(len(gold))}
    groups: dict[float, list[int]] = {}
    for i in range(len(gold)):
        groups.setdefault(key[i], []).append(i)
    share = {k: n * len(g) / len(gold) for k, g in groups.items()}
    take = {k: int(s) for k, s in share.items()}
    for k in sorted(share, key=lambda k: take[k] - share[k])[:n - sum(take.values())]:
        take[k] += 1
    generator = torch.Generator().manual_seed(seed)
    chosen = [g[j] for k, g in sorted(groups.items())
              for j in torch.randperm(len(g), generator=generator)[:take[k]].tolist()]
    return sorted(chosen)


def native_logits(build, bundle: Path, task: str, encoded: list[Encoded]) -> torch.Tensor:
    """The app's native path's logits for every input (HostHarness `score`: one JVM)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as inputs:
        for ids, _, types in encoded:
            inputs.write(json.dumps({"task": task, "input_ids": ids[0].tolist(),
                                     "token_type_ids": types[0].tolist()}) + "\n")
        inputs.flush()
        done = subprocess.run(build.command("score", str(bundle), "1", inputs.name),
                              capture_output=True, text=True, timeout=JVM_TIMEOUT_S)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ArchCheckError(f"{bundle}: the app's native path on {build.arch} failed on "
                             f"{task}: {last}")
    return torch.tensor(json.loads(done.stdout), dtype=torch.float32)


def dev_sample(spec, tokenizer, max_len: int, data_dir: Path,
               n: int | None) -> tuple[list[Encoded], list[float], str]:
    """The task's dev examples (a stratified sample of n), encoded, their labels and source."""
    if "dev" not in spec.files:
        raise ArchCheckError(f"task '{spec.name}' has no dev split to check on; export a bundle "
                             "without it, or add one to its task file")
    if not (data_dir / spec.files["dev"]).is_file():
        raise ArchCheckError(f"task '{spec.name}': {data_dir / spec.files['dev']} not found; "
                             "give --data-dir the folder holding every task's dev split")
    examples = read_examples(spec, data_dir, "dev", bad_rows="skip")
    chosen = stratified_sample([e.label for e in examples], n, spec.is_regression)
    which = (f"all {len(examples)}" if len(chosen) == len(examples) else
             f"{len(chosen)} of {len(examples)} (stratified, seed {SEED})")
    return (encode_texts(tokenizer, [examples[i].texts for i in chosen], max_len),
            [examples[i].label for i in chosen], f"{which} dev examples from {data_dir}")


def prepare(bundle: Path, run: Path, arch: str):
    """The bundle and the fp32 model it was exported from; each refusal one line."""
    host = native_host()
    reason = host.missing_toolchain(arch)
    if reason:
        raise ArchCheckError(f"cannot run the app's native path on {arch}: {reason}")
    loaded = load_bundle(bundle, runtime="executorch")  # the files the app's native path runs
    model, tokenizer, trunk_sha = load_model(resolve_model_dir(run), list(loaded.tasks))
    if trunk_sha != loaded.manifest.trunk.sha256:
        raise ArchCheckError(f"{run}: its trunk {trunk_sha[:12]}… is not the bundle's "
                             f"{loaded.manifest.trunk.sha256[:12]}…; give the run {bundle} was "
                             "exported from")
    return loaded, model, tokenizer


def check_architecture(bundle: Path, run: Path, data_dir: Path, arch: str,
                       max_examples: int | None, gate: Gate = Gate(),
                       log: Log = print) -> dict[str, Any]:
    """verify.json's `architectures.<arch>` record of the bundle (record_architecture writes
    it): every task's dev sample through the app's native path, the host's int8, and fp32."""
    bundle = Path(bundle)
    loaded, model, tokenizer = prepare(bundle, run, arch)
    max_len = loaded.manifest.tokenizer.max_length
    samples = {t: dev_sample(model.tasks[t], tokenizer, max_len, data_dir, max_examples)
               for t in loaded.tasks}  # every task's data checked before minutes of running
    try:
        build = native_host().build(arch)
    except native_host().NativeBuildError as e:
        raise ArchCheckError(f"cannot build the app's native path for {arch}: {e}") from None
    engine = Engine(loaded, "executorch")
    tasks, failures = {}, []
    for name, (encoded, gold, source) in samples.items():
        t0 = time.time()
        phone = native_logits(build, bundle, name, encoded)
        log(f"{name}: {len(encoded)} examples through the app's native path on {arch} "
            f"in {time.time() - t0:.0f} s")
        host, _ = run_task(engine, name, encoded)
        fp32 = reference_batched(model, name, encoded)
        spec = model.tasks[name]  # the phone against the host's int8 and fp32; the host vs fp32
        tasks[name] = {"examples": len(fp32), "source": source,
                       "vs_host_int8": compare(spec, host, phone, None, source, gate),
                       "vs_fp32": compare(spec, fp32, phone, gold, source, gate),
                       "host_int8_vs_fp32": compare(spec, fp32, host, gold, source, gate)}
        failures += [f for f in [failure(tasks[name]["vs_fp32"], f"{arch}/{name}", True, gate)]
                     if f]
    return {"arch": arch, "runtime": "executorch", "path": "the app's JNI and Java "
            "(android_demo/host/native_host.py)",
            "launcher": " ".join([*map(str, build.launcher[:-1]), "java"]),
            "qemu": (".".join(map(str, native_host().qemu_version(build.launcher[0])))
                     if "qemu" in Path(build.launcher[0]).name else None),
            "host_int8": "executorch Python runtime on this host", "gate": asdict(gate),
            "confidence": CONFIDENCE, "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "tasks": tasks, "passed": not failures, "failures": failures}


def record_architecture(bundle: Path, record: dict[str, Any]) -> Path:
    """Put `record` into the bundle's verify.json under architectures.<arch> (atomic; the
    other keys kept). A signed bundle's verify.json is signed too: the caller re-signs."""
    path = Path(bundle) / VERIFY_FILE
    report = read_json(path) if path.is_file() else {}
    report.setdefault(SECTION, {})[record["arch"]] = record
    write_json(path, report)
    return path
