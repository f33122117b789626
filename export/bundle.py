"""`cli.py export`: a run directory in, a verified bundle folder out (layout: export/BUNDLE.md).

The bundle is built in a temporary folder beside the target and renamed into place, so a crash
never leaves half a bundle. After writing, every runtime runs a sample of dev examples (or, with
no data, built-in sentences) and is compared with PyTorch fp32: fp32 bundles must match within
FP32_TOLERANCE; int8 bundles must agree with fp32 on at least `min_agreement` of the
classification predictions (regression: Pearson(int8, fp32) ≥ min_agreement). The result is
written to verify.json and summarised in manifest.json.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from export.programs import PAD_OUTPUTS, reference_outputs
from export.runtime import FORMAT, VERSION, Engine, load_bundle, sha256_bytes_of
from trainer.checkpoint import TRUNK_WEIGHTS, load_model, read_json, resolve_model_dir
from trainer.errors import PalkitError

FP32_TOLERANCE = 1e-3      # max |bundle - PyTorch| allowed in fp32 outputs (typically ~1e-6)
DEFAULT_MIN_AGREEMENT = 0.9
VERIFY_EXAMPLES = 32       # per task
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
TARGETS = ("android", "executorch", "onnx")


def palkit_version() -> str:
    try:
        from importlib.metadata import version
        return version("palkit")
    except Exception:
        return "0.1.0"


def runtime_versions() -> dict[str, str]:
    from importlib.metadata import version
    return {"executorch": version("executorch"), "onnxruntime": version("onnxruntime"),
            "torch": torch.__version__.split("+")[0]}


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def file_entries(folder: Path, rels: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for rel in sorted(set(rels)):
        digest, size = sha256_bytes_of(folder / rel)
        out[rel] = {"sha256": digest, "bytes": size}
    return out


def write_vocab(tokenizer, path: Path) -> None:
    vocab = tokenizer.get_vocab()
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise PalkitError("the run's tokenizer vocabulary has gaps in its ids; cannot write "
                          "vocab.txt")
    path.write_text("".join(f"{tok}\n" for tok, _ in by_id), encoding="utf-8")


def tokenizer_settings(trunk_dir: Path, tokenizer, max_length: int) -> dict[str, Any]:
    cfg = {}
    if (trunk_dir / "tokenizer_config.json").is_file():
        cfg = read_json(trunk_dir / "tokenizer_config.json")
    lower = bool(cfg.get("do_lower_case", True))
    strip = cfg.get("strip_accents")
    return {"vocab_file": "vocab.txt", "lowercase": lower,
            "strip_accents": lower if strip is None else bool(strip),
            "max_length": max_length, "cls_token": tokenizer.cls_token,
            "sep_token": tokenizer.sep_token, "pad_token": tokenizer.pad_token,
            "unk_token": tokenizer.unk_token, "mask_token": tokenizer.mask_token,
            "max_input_chars_per_word": 100}


def task_entry(spec, trunk_sha: str, runtimes: list[str]) -> dict[str, Any]:
    files = {}
    if "executorch" in runtimes:
        files["executorch"] = f"executorch/{spec.name}.pte"
    if "onnxruntime" in runtimes:
        files["onnxruntime"] = f"onnx/{spec.name}.onnx_adapter"
    return {"name": spec.name, "kind": spec.kind,
            "labels": list(spec.labels) if spec.labels else None,
            "score_range": list(spec.score_range) if spec.score_range else None,
            "metric": spec.metric, "num_outputs": spec.num_outputs,
            "trunk_sha256": trunk_sha, "files": files, "spec": spec.to_dict()}


# ---- verification inputs ---------------------------------------------------------------------

def verification_inputs(spec, tokenizer, max_len: int, data_dir: Path | None,
                        n: int) -> tuple[list[tuple[torch.Tensor, ...]], list[float] | None, str]:
    from trainer.data import read_examples

    texts, gold, source = None, None, "built-in sentences (no dev data found)"
    if data_dir is not None and "dev" in spec.files and (data_dir / spec.files["dev"]).is_file():
        examples = read_examples(spec, data_dir, "dev", bad_rows="skip")[:n]
        texts, gold = [e.texts for e in examples], [e.label for e in examples]
        source = f"{len(examples)} dev examples from {data_dir}"
    if texts is None:
        texts = [pair if spec.is_pair else pair[:1] for pair in BUILTIN_SENTENCES]
    encoded = []
    for t in texts:
        enc = tokenizer(*t, truncation="longest_first", max_length=max_len,
                        return_token_type_ids=True)
        ids = torch.tensor([enc["input_ids"]])
        encoded.append((ids, torch.ones_like(ids), torch.tensor([enc["token_type_ids"]])))
    return encoded, gold, source


def pearson(a: list[float], b: list[float]) -> float:
    from trainer.metrics import pearson as p
    return p(torch.tensor(a), torch.tensor(b))


def verify_bundle(folder: Path, model, tokenizer, max_len: int, data_dir: Path | None,
                  int8: bool, min_agreement: float, tasks: list[str],
                  n: int = VERIFY_EXAMPLES) -> dict[str, Any]:
    """Run the written bundle on every runtime and compare with PyTorch fp32."""
    from trainer.metrics import task_metrics

    bundle = load_bundle(folder)
    report: dict[str, Any] = {"tolerance_fp32": FP32_TOLERANCE, "min_agreement": min_agreement,
                              "runtimes": {}}
    failures = []
    inputs = {t: verification_inputs(model.tasks[t], tokenizer, max_len, data_dir, n)
              for t in tasks}
    checks = [(runtime, False) for runtime in bundle.runtimes]
    program = bundle.manifest["runtimes"].get("executorch", {}).get("all_tasks")
    if program and set(program["tasks"]) <= set(tasks):  # add_adapter leaves it unchanged
        checks.append(("executorch", True))
    for runtime, whole in checks:
        engine = Engine(bundle, runtime)
        per_task = {}
        for t in (engine.all_tasks_program() if whole else tasks):
            spec = model.tasks[t]
            encoded, gold, source = inputs[t]
            ref, got = [], []
            for ids, mask, types in encoded:
                ref.append(reference_outputs(model, t, ids, mask, types)[0])
                if whole:  # the all-tasks program on t's input: check t's output slot
                    out = engine.run_all_ids(ids.numpy(), mask.numpy(), types.numpy())[0][t]
                else:
                    out, _, _ = engine.run_ids(t, ids.numpy(), mask.numpy(), types.numpy())
                got.append(torch.from_numpy(out))
            ref_t, got_t = torch.stack(ref), torch.stack(got)
            r = {"examples": len(encoded), "source": source,
                 "max_abs_diff": float((ref_t - got_t).abs().max())}
            if spec.is_regression:
                r["agreement"] = round(pearson(ref_t[:, 0].tolist(), got_t[:, 0].tolist()), 6)
                r["agreement_kind"] = "pearson(bundle, pytorch) of scores"
                pred_ref, pred_got = ref_t[:, 0], got_t[:, 0]
            else:
                pred_ref, pred_got = ref_t.argmax(-1), got_t.argmax(-1)
                r["agreement"] = float((pred_ref == pred_got).float().mean())
                r["agreement_kind"] = "fraction of equal argmax"
            if gold is not None:
                g = torch.tensor(gold)
                m_ref = task_metrics(spec, pred_ref.float(), g)
                m_got = task_metrics(spec, pred_got.float(), g)
                r["metrics_pytorch_fp32"] = m_ref
                r["metrics_bundle"] = m_got
                r["metric_deltas"] = {k: m_got[k] - m_ref[k] for k in m_ref}
            where = f"{runtime}{'/all-tasks program' if whole else ''}/{t}"
            if not int8 and r["max_abs_diff"] > FP32_TOLERANCE:
                failures.append(f"{where}: fp32 outputs differ from PyTorch by "
                                f"{r['max_abs_diff']:.2e} (> {FP32_TOLERANCE:g})")
            if int8 and r["agreement"] < min_agreement:
                failures.append(f"{where}: int8 agreement {r['agreement']:.3f} < "
                                f"{min_agreement} ({r['agreement_kind']})")
            per_task[t] = r
        if whole:
            report["runtimes"][runtime]["all_tasks_program"] = {"tasks": per_task}
        else:
            report["runtimes"][runtime] = {"tasks": per_task}
    report["passed"] = not failures
    report["failures"] = failures
    return report


class ExportError(PalkitError, RuntimeError):
    """Export produced a bundle that failed verification, or cannot run as asked."""


# ---- export ----------------------------------------------------------------------------------

def runtimes_for(target: str, onnx: bool) -> list[str]:
    if target == "executorch":
        return ["executorch"]
    if target == "onnx":
        return ["onnxruntime"]
    return ["executorch", "onnxruntime"] if onnx else ["executorch"]


def default_max_len(model) -> int:
    return min(128, int(model.trunk.config.max_position_embeddings))


def calibration_inputs(model, max_len: int, tokenizer) -> list[tuple[torch.Tensor, ...]]:
    """Fixed sentences (deterministic): dynamic quantization only needs shapes to trace."""
    out = []
    for a, b in BUILTIN_SENTENCES[:4]:
        enc = tokenizer(a, b, truncation="longest_first", max_length=max_len,
                        return_token_type_ids=True)
        ids = torch.tensor([enc["input_ids"]])
        out.append((ids, torch.ones_like(ids), torch.tensor([enc["token_type_ids"]])))
    return out


def export_run(run: Path, out: Path, target: str = "android", quant: str = "int8",
               tasks: list[str] | None = None, max_len: int | None = None, onnx: bool = True,
               data_dir: Path | None = None, min_agreement: float = DEFAULT_MIN_AGREEMENT,
               all_tasks: bool = True, log=print) -> list[Path]:
    """Export a run (or a --mode separate run: one bundle per model under `out`)."""
    run = Path(run)
    if (run / "models").is_dir() and not (run / "model").exists():
        outs = []
        for sub in sorted(p for p in (run / "models").iterdir() if p.is_dir()):
            log(f"separate-mode model {sub.name} -> {out / sub.name}")
            outs += export_run(sub, out / sub.name, target, quant, tasks, max_len, onnx,
                               data_dir, min_agreement, all_tasks, log)
        return outs
    return [export_bundle(resolve_model_dir(run), out, target, quant, tasks, max_len, onnx,
                          data_dir, min_agreement, all_tasks, log)]


def export_bundle(model_dir: Path, out: Path, target: str, quant: str, tasks: list[str] | None,
                  max_len: int | None, onnx: bool, data_dir: Path | None,
                  min_agreement: float, all_tasks: bool = True, log=print) -> Path:
    if target not in TARGETS:
        raise ExportError(f"unknown target '{target}'; use one of {', '.join(TARGETS)}")
    if quant not in ("int8", "fp32"):
        raise ExportError(f"unknown quantization '{quant}'; use int8 or fp32")
    model, tokenizer, trunk_sha = load_model(model_dir, tasks)
    limit = int(model.trunk.config.max_position_embeddings)
    max_len = max_len or default_max_len(model)
    if not 2 <= max_len <= limit:
        raise ExportError(f"--max-len {max_len} must be between 2 and {limit} (the trunk's "
                          "position table)")
    int8 = quant == "int8"
    runtimes = runtimes_for(target, onnx)
    names = list(model.tasks)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    build.chmod(0o755)  # mkdtemp makes it private; a bundle is meant to be copied and shared
    try:
        t0 = time.time()
        write_vocab(tokenizer, build / "vocab.txt")
        calib = calibration_inputs(model, max_len, tokenizer)
        rels = ["vocab.txt"]
        details: dict[str, Any] = {}
        if "executorch" in runtimes:
            from export.executorch_export import lower_task
            trunk_hash = None
            for name in names:
                log(f"executorch: lowering {name} ({quant})")
                sub = build / ".et" / name
                info = lower_task(model, name, sub, int8, max_len, calib)
                digest, _ = sha256_bytes_of(sub / "trunk.ptd")
                if trunk_hash not in (None, digest):
                    raise ExportError("trunk.ptd differs between tasks; the trunk would be "
                                      "stored twice (please report this)")
                trunk_hash = digest
                (build / "executorch").mkdir(exist_ok=True)
                os.replace(sub / f"{name}.pte", build / "executorch" / f"{name}.pte")
                if not (build / "executorch" / "trunk.ptd").exists():
                    os.replace(sub / "trunk.ptd", build / "executorch" / "trunk.ptd")
                details["executorch_non_delegated_ops"] = info["non_delegated_ops"]
            rels += ["executorch/trunk.ptd", *[f"executorch/{n}.pte" for n in names]]
            if all_tasks and len(names) > 1:
                from export.executorch_export import ALL_TASKS_PROGRAM, lower_all_tasks
                log(f"executorch: lowering the all-tasks program ({', '.join(names)})")
                sub = build / ".et" / ALL_TASKS_PROGRAM
                lower_all_tasks(model, names, sub, int8, max_len, calib)
                if sha256_bytes_of(sub / "trunk.ptd")[0] != trunk_hash:
                    raise ExportError("the all-tasks program's trunk.ptd differs from the task "
                                      "programs' (please report this); export with "
                                      "--no-all-tasks meanwhile")
                rel = f"executorch/{ALL_TASKS_PROGRAM}.pte"
                os.replace(sub / f"{ALL_TASKS_PROGRAM}.pte", build / rel)
                details["executorch_all_tasks"] = {"file": rel, "tasks": names}
                rels.append(rel)
            shutil.rmtree(build / ".et")
        if "onnxruntime" in runtimes:
            from export.onnx_export import export_trunk, write_adapter
            log(f"onnxruntime: exporting trunk.onnx ({quant})")
            (build / "onnx").mkdir()
            info = export_trunk(model, build / "onnx" / "trunk.onnx", int8, calib[0])
            details["onnx_fusions"] = info["fusions"]
            details["onnx_adapter_inputs"] = info["adapter_inputs"]
            for name in names:
                write_adapter(model, name, build / "onnx" / f"{name}.onnx_adapter", int8)
            rels += ["onnx/trunk.onnx", *[f"onnx/{n}.onnx_adapter" for n in names]]
        manifest = build_manifest(model, model_dir, trunk_sha, tokenizer, max_len, int8,
                                  runtimes, names, details)
        manifest["files"] = file_entries(build, rels)
        write_manifest(build / "manifest.json", manifest)
        log(f"verifying on {', '.join(runtimes)}")
        report = verify_bundle(build, model, tokenizer, max_len, data_dir, int8, min_agreement,
                               names)
        write_manifest(build / "verify.json", report)
        if not report["passed"]:
            raise ExportError("verification failed: " + "; ".join(report["failures"]) +
                              f" (nothing written to {out}; lower --min-agreement to accept)")
        if out.exists():
            if not (out / "manifest.json").is_file():
                raise ExportError(f"{out} exists and is not a bundle; pick another --out")
            shutil.rmtree(out)
        os.replace(build, out)
        log(f"wrote {out} in {time.time() - t0:.0f} s")
        return out
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)


def build_manifest(model, model_dir: Path, trunk_sha: str, tokenizer, max_len: int, int8: bool,
                   runtimes: list[str], names: list[str], details: dict[str, Any]) -> dict[str, Any]:
    cfg = model.trunk.config
    summary = model_dir / "summary.json"
    base = read_json(summary).get("config", {}).get("base_model") if summary.is_file() else None
    versions = runtime_versions()
    from quant import onnx_int8, xnnpack
    rt: dict[str, Any] = {}
    if "executorch" in runtimes:
        rt["executorch"] = {"version": versions["executorch"], "torch": versions["torch"],
                            "trunk_data": "executorch/trunk.ptd", "backend": "xnnpack",
                            "seq_len": {"min": 2, "max": max_len, "dynamic": True},
                            "non_delegated_ops": details.get("executorch_non_delegated_ops")}
        if details.get("executorch_all_tasks"):
            rt["executorch"]["all_tasks"] = details["executorch_all_tasks"]
    if "onnxruntime" in runtimes:
        rt["onnxruntime"] = {"version": versions["onnxruntime"], "opset": 17,
                             "trunk_model": "onnx/trunk.onnx", "output_columns": PAD_OUTPUTS,
                             "adapter_inputs": details.get("onnx_adapter_inputs"),
                             "fusions": details.get("onnx_fusions")}
    q_details = {}
    if int8 and "executorch" in runtimes:
        q_details["executorch"] = xnnpack.SCHEME
    if int8 and "onnxruntime" in runtimes:
        q_details["onnxruntime"] = onnx_int8.SCHEME
    return {
        "format": FORMAT, "version": VERSION, "palkit_version": palkit_version(),
        "trunk": {"sha256": trunk_sha, "base_model": base, "hidden_size": cfg.hidden_size,
                  "num_layers": cfg.num_hidden_layers,
                  "pal": model.pal.to_dict() if model.pal else None},
        "tokenizer": tokenizer_settings(model_dir / "trunk", tokenizer, max_len),
        "quantization": {"scheme": "int8" if int8 else "fp32",
                         "details": q_details or "none: fp32 weights and activations"},
        "runtimes": rt,
        "io": {"inputs": [{"name": n, "dtype": "int64", "shape": [1, "seq"]}
                          for n in ("input_ids", "attention_mask", "token_type_ids")],
               "outputs": [{"name": "logits", "dtype": "float32", "shape": [1, "num_outputs"]}]},
        "tasks": [task_entry(model.tasks[n], trunk_sha, runtimes) for n in names],
    }


# ---- add one adapter to an existing bundle ---------------------------------------------------

def add_adapter(run: Path, task: str, bundle_dir: Path, replace: bool = False,
                data_dir: Path | None = None, min_agreement: float = DEFAULT_MIN_AGREEMENT,
                log=print) -> Path:
    """Write only `task`'s files into an existing bundle and update its manifest; the trunk
    files are reused unchanged (refused when the run's trunk is not the bundle's)."""
    bundle_dir = Path(bundle_dir)
    bundle = load_bundle(bundle_dir)
    m = bundle.manifest
    model_dir = resolve_model_dir(run)
    from trainer.checkpoint import sha256_file
    run_sha = sha256_file(model_dir / "trunk" / TRUNK_WEIGHTS)
    if run_sha != m["trunk"]["sha256"]:
        raise ExportError(f"{run}: its trunk {run_sha[:12]}… is not this bundle's trunk "
                          f"{m['trunk']['sha256'][:12]}…; export a new bundle from that run "
                          "instead")
    if task in bundle.tasks and not replace:
        raise ExportError(f"{bundle_dir}: already has task '{task}'; pass --replace to "
                          "overwrite it")
    if not (model_dir / "tasks" / task).is_dir():
        raise ExportError(f"{model_dir}: has no task '{task}' (it has: "
                          f"{', '.join(sorted(p.name for p in (model_dir / 'tasks').iterdir()))})")
    model, tokenizer, _ = load_model(model_dir, [task])
    int8 = m["quantization"]["scheme"] == "int8"
    max_len = int(m["tokenizer"]["max_length"])
    runtimes = bundle.runtimes
    build = Path(tempfile.mkdtemp(prefix=".adapter.", dir=bundle_dir))
    try:
        new: dict[str, Path] = {}
        if "executorch" in runtimes:
            from export.executorch_export import lower_task
            log(f"executorch: lowering {task}")
            lower_task(model, task, build, int8, max_len,
                       calibration_inputs(model, max_len, tokenizer))
            if sha256_bytes_of(build / "trunk.ptd")[0] != m["files"]["executorch/trunk.ptd"]["sha256"]:
                raise ExportError("the re-lowered trunk.ptd differs from the bundle's (different "
                                  "palkit/ExecuTorch version?); export a new bundle instead")
            new[f"executorch/{task}.pte"] = build / f"{task}.pte"
        if "onnxruntime" in runtimes:
            from export.onnx_export import write_adapter
            if model.tasks[task].num_outputs > int(m["runtimes"]["onnxruntime"]["output_columns"]):
                raise ExportError(f"task '{task}' has more outputs than trunk.onnx provides")
            write_adapter(model, task, build / f"{task}.onnx_adapter", int8)
            new[f"onnx/{task}.onnx_adapter"] = build / f"{task}.onnx_adapter"
        manifest = json.loads(json.dumps(m))
        stale = None
        program = manifest["runtimes"].get("executorch", {}).get("all_tasks")
        if program and task in program["tasks"]:
            # The all-tasks program holds the old weights of this task: drop it, do not lie.
            stale = program["file"]
            del manifest["runtimes"]["executorch"]["all_tasks"]
            del manifest["files"][stale]
        manifest["tasks"] = [t for t in manifest["tasks"] if t["name"] != task]
        manifest["tasks"].append(task_entry(model.tasks[task], run_sha, runtimes))
        for rel, src in new.items():
            digest, size = sha256_bytes_of(src)
            manifest["files"][rel] = {"sha256": digest, "bytes": size}
        # Verify against a staged copy: the trunk files are linked, not rewritten.
        stage = build / "stage"
        for rel in manifest["files"]:
            dst = stage / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            src = new.get(rel, bundle_dir / rel)
            os.link(src, dst) if src.stat().st_dev == build.stat().st_dev else shutil.copy(src, dst)
        write_manifest(stage / "manifest.json", manifest)
        report = verify_bundle(stage, model, tokenizer, max_len, data_dir, int8, min_agreement,
                               [task])
        if not report["passed"]:
            raise ExportError("verification failed: " + "; ".join(report["failures"]))
        for rel, src in new.items():
            os.replace(src, bundle_dir / rel)
        old_verify = bundle_dir / "verify.json"
        if old_verify.is_file():
            v = json.loads(old_verify.read_text())
            for r, rr in report["runtimes"].items():
                v.setdefault("runtimes", {}).setdefault(r, {}).setdefault("tasks", {}).update(
                    rr["tasks"])
            write_manifest(old_verify, v)
        write_manifest(bundle_dir / "manifest.json", manifest)
        if stale:
            (bundle_dir / stale).unlink(missing_ok=True)
            log(f"removed {stale}: it held the replaced '{task}'; re-export the bundle to "
                "rebuild the all-tasks program")
        log(f"added task '{task}' to {bundle_dir}")
        return bundle_dir
    finally:
        shutil.rmtree(build, ignore_errors=True)

