"""`palkit export`: a run directory in, a verified bundle folder out (layout: runtime/BUNDLE.md).

The bundle is built in a temporary folder beside the target and swapped into place in one step
(core/fileio.py), so a crash never leaves half a bundle, nor no bundle where one was. Before
that, export/verify.py checks every runtime against PyTorch fp32 (the int8 gate and its
fallback included) and the report is written as verify.json.
"""
from __future__ import annotations

import dataclasses
import os
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import torch

from palkit import palkit_version
from palkit.core.errors import PalkitError
from palkit.core.fileio import (file_digest, remove_tree, replace_dir, sha256_file, staging_dir,
                                write_json, write_vocab)
from palkit.export.executorch_export import adapter_of, export_order
from palkit.export.gate import Gate
from palkit.export.options import QUANTS, TARGETS, ExportOptions
from palkit.export.programs import output_columns
from palkit.export.verify import (BUILTIN_SENTENCES, encode_texts, gated_export, summary,
                                  verify_bundle)
from palkit.quant.mixed import keep_in_float
from palkit.runtime.bundle import load_bundle
from palkit.runtime.kinds import KINDS
from palkit.runtime.manifest import (IO, MANIFEST_FILE, RUNTIMES, VERIFY_FILE, AllTasksGraph,
                                     AllTasksMethod,
                                     BundleError, ExecuTorchSection, FileEntry, Manifest,
                                     OnnxRuntimeSection, TaskEntry, TokenizerSettings, Trunk,
                                     adapter_text, write_manifest)
from palkit.runtime.signing import SIGNATURE_FILE, check_signing_key, sign_bundle
from palkit.trainer.checkpoint import (TRUNK_WEIGHTS, load_model, read_json, resolve_model_dir,
                                       separate_models)
from palkit.trainer.model import PalConfig
from palkit.ui.progress import say

Log = Callable[[str], None]
ONNX_TRUNK = "onnx/trunk.onnx"
ONNX_ALL_TASKS = "onnx/all_tasks.onnx"
ONNX_DATA = "onnx/trunk.onnx.data"  # both graphs' weights, once (onnx_export.save_sharing_weights)


class ExportError(PalkitError, RuntimeError):
    """Export produced a bundle that failed verification, or cannot run as asked."""


def tokenizer_settings(trunk_dir: Path, tokenizer, max_length: int) -> TokenizerSettings:
    path = trunk_dir / "tokenizer_config.json"
    cfg = read_json(path) if path.is_file() else {}
    lower = bool(cfg.get("do_lower_case", True))
    strip = cfg.get("strip_accents")
    return TokenizerSettings(
        vocab_file="vocab.txt", lowercase=lower,
        strip_accents=lower if strip is None else bool(strip), max_length=max_length,
        cls_token=tokenizer.cls_token, sep_token=tokenizer.sep_token,
        pad_token=tokenizer.pad_token, unk_token=tokenizer.unk_token,
        mask_token=tokenizer.mask_token, max_input_chars_per_word=100)


def task_entry(spec, trunk_sha: str, runtimes: list[str], adapter: dict[str, Any]) -> TaskEntry:
    paths = {"executorch": f"executorch/{spec.name}.safetensors",
             "onnxruntime": f"onnx/{spec.name}.onnx_adapter"}
    return TaskEntry(name=spec.name, kind=spec.kind,
                     labels=list(spec.labels) if spec.labels else None,
                     score_range=list(spec.score_range) if spec.score_range else None,
                     metric=spec.metric, num_outputs=spec.num_outputs, trunk_sha256=trunk_sha,
                     files={r: paths[r] for r in runtimes}, spec=spec.to_dict(),
                     decoding=KINDS[spec.kind].decoding,
                     threshold=spec.threshold if spec.is_multi_label else None, adapter=adapter)


# ---- export ----------------------------------------------------------------------------------

def runtimes_for(target: str, onnx: bool) -> list[str]:
    one = {"executorch": ["executorch"], "onnx": ["onnxruntime"]}
    return one.get(target, list(RUNTIMES) if onnx else ["executorch"])


def default_max_len(model) -> int:
    return min(128, int(model.trunk.config.max_position_embeddings))


def calibration_inputs(model, max_len: int, tokenizer) -> list[tuple[torch.Tensor, ...]]:
    """Fixed sentences (deterministic): dynamic quantization only needs shapes to trace."""
    return encode_texts(tokenizer, BUILTIN_SENTENCES[:4], max_len)


def export_run(run: Path, out: Path, opts: ExportOptions = ExportOptions(),
               log: Log = say) -> list[Path]:
    """Export a run (or a --mode separate run: one bundle per model under `out`). With
    `opts.sign_key`, each bundle is signed (model.sig, runtime/signing.py) before it is
    published."""
    run, out = Path(run), Path(out)
    if opts.sign_key is not None:
        check_signing_key(opts.sign_key)  # before minutes of lowering
    models = separate_models(run) or [run]
    outs = []
    for sub in models:
        if sub is not run:
            log(f"separate-mode model {sub.name} -> {out / sub.name}")
        outs.append(export_bundle(resolve_model_dir(sub), out if sub is run else out / sub.name,
                                  opts, log))
    return outs


def check_export_target(out: Path, target: str, quant: str, overwrite: bool) -> None:
    if target not in TARGETS:
        raise ExportError(f"unknown target '{target}'; use one of {', '.join(TARGETS)}")
    if quant not in QUANTS:
        raise ExportError(f"unknown quantization '{quant}'; use int8 or fp32")
    if out.exists() and not (out / MANIFEST_FILE).is_file():
        raise ExportError(f"{out} exists and is not a bundle; pick another --out")
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists; pass --overwrite to replace it")


def export_bundle(model_dir: Path, out: Path, opts: ExportOptions, log: Log = say) -> Path:
    """Write, verify and publish one bundle of the model folder `model_dir`."""
    out = Path(out)
    check_export_target(out, opts.target, opts.quant, opts.overwrite)
    model, tokenizer, trunk_sha = load_model(model_dir, opts.tasks)
    limit = int(model.trunk.config.max_position_embeddings)
    max_len = opts.max_len or default_max_len(model)
    if not 2 <= max_len <= limit:
        raise ExportError(f"--max-len {max_len} must be between 2 and {limit} (the trunk's "
                          "position table)")
    int8, runtimes = opts.quant == "int8", runtimes_for(opts.target, opts.onnx)
    names = export_order(model, list(model.tasks))
    build = staging_dir(out)
    try:
        t0 = time.time()
        write_vocab(tokenizer, build / "vocab.txt")
        calib = calibration_inputs(model, max_len, tokenizer)
        details: dict[str, Any] = {}

        def write(runtime: str, float_layers: list[str]) -> None:
            """(Re)write one runtime's files, with these Linears kept in float, and the manifest."""
            kept = keep_in_float(model, float_layers)
            if runtime == "executorch":
                remove_tree(build / "executorch")
                details[runtime] = write_executorch(kept, names, build, int8, max_len, calib,
                                                    opts.all_tasks, log)
            else:
                remove_tree(build / "onnx")
                details[runtime] = write_onnx(kept, names, build, int8, calib, opts.all_tasks,
                                              log)
            details[runtime]["float_layers"] = float_layers
            write_manifest(build, build_manifest(build, model, model_dir, trunk_sha, tokenizer,
                                                 max_len, int8, details, names))

        for runtime in runtimes:
            write(runtime, list(opts.gate.keep_float.get(runtime, [])) if int8 else [])
        report = gated_export(write, build, model, tokenizer, max_len, opts.data_dir, int8,
                              opts.gate, names, runtimes, log)
        refused = out.parent / f"{out.name}.refused-verify.json"
        if not report["passed"]:
            write_json(refused, report)
            raise ExportError(f"{summary(report)} (nothing written to {out}; the whole report, "
                              f"per-layer SQNR included: {refused}; see --max-drop)")
        write_json(build / VERIFY_FILE, report)
        refused.unlink(missing_ok=True)  # a refusal's report from an earlier try
        if opts.sign_key is not None:
            sign_bundle(build, opts.sign_key)
        replace_dir(build, out)
        log(f"wrote {out} in {time.time() - t0:.0f} s")
        return out
    finally:
        remove_tree(build)


def write_executorch(model, names: list[str], build: Path, int8: bool, max_len: int, calib,
                     all_tasks: bool, log: Log) -> dict[str, Any]:
    """executorch/trunk.pte (the one-task methods: task weights are method inputs), its
    trunk.ptd, all_tasks.pte when several tasks run on one input, and one weights file per task
    (executorch/<task>.safetensors). Returns what the manifest records about them."""
    from palkit.export.executorch_export import (ALL_TASKS_METHOD, ALL_TASKS_PROGRAM,
                                                 ONE_TASK_METHOD, lower_trunk_program, method_name,
                                                 write_task_weights)

    folder = build / "executorch"
    folder.mkdir()
    several = all_tasks and len(names) > 1
    facts = lower_trunk_program(model, list(names) if several else None, folder, int8, max_len,
                                calib, output_columns(model), log=log)
    for name in names:
        method = method_name(model.task_pal(name), model)
        wanted = facts["methods"][method]["task_inputs"] if method != ONE_TASK_METHOD \
            else facts["task_inputs"]
        if write_task_weights(model, name, folder / f"{name}.safetensors", int8,
                              output_columns(model)) != wanted:
            raise ExportError(f"task '{name}' has other weights than its method {method} takes; "
                              "please report this")
    return {"non_delegated_ops": facts["non_delegated_ops"], "task_inputs": facts["task_inputs"],
            "methods": facts["methods"] or None,
            "all_tasks": AllTasksMethod(f"executorch/{ALL_TASKS_PROGRAM}.pte", ALL_TASKS_METHOD,
                                        list(names)) if several else None}


def write_onnx(model, names: list[str], build: Path, int8: bool, calib, all_tasks: bool,
               log: Log) -> dict[str, Any]:
    """onnx/trunk.onnx (one task per run: PALs in the union of the tasks' placements, which any
    task added later that fits it runs in), a one-task graph per other placement the tasks have
    (onnx/head.onnx, onnx/pal_<layers>.onnx: a task runs only its own adapter), for several
    tasks onnx/all_tasks.onnx (all of them on one input), every graph's weights once in
    onnx/trunk.onnx.data, and one .onnx_adapter per task, laid out for its own placement."""
    from palkit.export.onnx_export import (export_all_tasks, export_trunk,
                                           save_sharing_weights, write_adapter)
    from palkit.export.programs import graph_pal

    pals = {n: model.task_pal(n) for n in names}
    union = graph_pal(list(pals.values()))
    kind, columns = "int8" if int8 else "fp32", output_columns(model)
    (build / "onnx").mkdir()
    log(f"onnxruntime: exporting trunk.onnx ({kind}, {graph_text(union)})")
    work = build / "onnx"
    trunk, info = export_trunk(model, int8, calib[0], union, columns, work)
    graphs = {build / ONNX_TRUNK: trunk}
    own: dict[str, dict[str, Any]] = {}
    for pal in dict.fromkeys(p for p in pals.values() if p != union):
        name = onnx_graph_name(pal)
        if name in own:  # a task names its graph by its adapter's layers alone
            raise ExportError(f"two placements of this run's tasks have PALs in layers "
                              f"{list(pal.layers)} (one with a shared V^E/V^D, one without); a "
                              "bundle runs one placement per set of layers: export them apart")
        log(f"onnxruntime: exporting {name}.onnx ({kind}, {graph_text(pal)})")
        graphs[build / "onnx" / f"{name}.onnx"], facts = export_trunk(model, int8, calib[0], pal,
                                                                      columns, work)
        own[name] = {"model": f"onnx/{name}.onnx", "adapter": adapter_of(pal),
                     "pal": pal.to_dict() if pal else None,
                     "adapter_inputs": facts["adapter_inputs"]}
    several = all_tasks and len(names) > 1
    if several:
        log(f"onnxruntime: exporting all_tasks.onnx ({kind}, {len(names)} tasks on one input)")
        graphs[build / ONNX_ALL_TASKS] = export_all_tasks(model, names, int8, calib[0], columns,
                                                          work)
    save_sharing_weights(graphs, build / ONNX_DATA)
    for i, name in enumerate(names, 1):
        log(f"onnxruntime: writing {name}.onnx_adapter [{i}/{len(names)}]")
        write_adapter(model, name, build / "onnx" / f"{name}.onnx_adapter", int8, pals[name],
                      columns)
    return {"fusions": info["fusions"], "adapter_inputs": info["adapter_inputs"],
            "pal": union.to_dict() if union else None, "graphs": own or None,
            "all_tasks": AllTasksGraph(ONNX_ALL_TASKS, list(names)) if several else None}


def onnx_graph_name(pal: PalConfig | None) -> str:
    """A one-task graph's name (its file onnx/<name>.onnx) from the adapter it runs."""
    return "head" if pal is None else "pal_" + "_".join(map(str, pal.layers))


def graph_text(graph) -> str:
    """A graph's PAL placement in words."""
    if graph is None:
        return "heads only"
    projections = "one V^E/V^D shared" if graph.share_projections else "a V^E/V^D per layer"
    return f"PALs in layers {list(graph.layers)}, {projections}"


def build_manifest(build: Path, model, model_dir: Path, trunk_sha: str, tokenizer, max_len: int,
                   int8: bool, details: dict[str, Any], names: list[str]) -> Manifest:
    """The manifest of the bundle written in `build` (`details`: what each runtime wrote)."""
    from palkit.export.executorch_export import ONE_TASK_METHOD
    from palkit.export.onnx_export import OPSET
    from palkit.quant import onnx_int8, xnnpack

    cfg, torch_version = model.trunk.config, torch.__version__.split("+")[0]
    summary = model_dir / "summary.json"
    base = read_json(summary).get("config", {}).get("base_model") if summary.is_file() else None
    runtimes: dict[str, Any] = {}
    if "executorch" in details:
        et = details["executorch"]
        runtimes["executorch"] = ExecuTorchSection(
            version=version("executorch"), torch=torch_version, backend="xnnpack",
            program="executorch/trunk.pte", trunk_data="executorch/trunk.ptd",
            method=ONE_TASK_METHOD, task_inputs=et["task_inputs"], output_columns=output_columns(model),
            seq_len={"min": 2, "max": max_len, "dynamic": True},
            non_delegated_ops=et["non_delegated_ops"], all_tasks=et["all_tasks"],
            methods=et["methods"])
    if "onnxruntime" in details:
        ort = details["onnxruntime"]
        runtimes["onnxruntime"] = OnnxRuntimeSection(
            version=version("onnxruntime"), opset=OPSET, trunk_model=ONNX_TRUNK,
            output_columns=output_columns(model), adapter_inputs=ort["adapter_inputs"],
            fusions=ort["fusions"], pal=ort["pal"], trunk_data=ONNX_DATA,
            all_tasks=ort["all_tasks"], graphs=ort["graphs"])
    schemes = {"executorch": xnnpack.SCHEME, "onnxruntime": onnx_int8.SCHEME}
    q_details = {r: schemes[r] for r in runtimes} if int8 else {}
    kept = {r: details[r]["float_layers"] for r in runtimes} if int8 else {}
    manifest = Manifest(
        palkit_version=palkit_version(),
        trunk=Trunk(trunk_sha, base, cfg.hidden_size, cfg.num_hidden_layers,
                    model.pal.to_dict() if model.pal else None),
        tokenizer=tokenizer_settings(model_dir / "trunk", tokenizer, max_len),
        quantization={"scheme": "int8" if int8 else "fp32",
                      "details": q_details or "none: fp32 weights and activations",
                      **({"float_layers": kept} if kept else {})},
        runtimes=runtimes, tasks=[task_entry(model.tasks[n], trunk_sha, list(runtimes),
                                             adapter_of(model.task_pal(n))) for n in names],
        files={}, io=IO)
    return dataclasses.replace(manifest, files={rel: FileEntry(*file_digest(build / rel))
                                                for rel in sorted(manifest.files_for())})


# ---- add one adapter to an existing bundle ---------------------------------------------------

def add_adapter(run: Path, task: str, bundle_dir: Path, replace: bool = False,
                data_dir: Path | None = None, gate: Gate = Gate(),
                log: Log = say, sign_key: Path | None = None) -> Path:
    """Write only `task`'s files into an existing bundle and update its manifest; the trunk
    files are reused unchanged (refused when the run's trunk is not the bundle's). The new
    bundle is staged beside the old one (unchanged files hard-linked), re-signed when the old
    one was signed, and swapped in."""
    bundle_dir = Path(bundle_dir)
    if (bundle_dir / SIGNATURE_FILE).is_file() and sign_key is None:
        raise ExportError(f"{bundle_dir / SIGNATURE_FILE}: the bundle is signed; pass --sign-key "
                          "to re-sign it with the task added")
    if sign_key is not None:
        check_signing_key(sign_key)
    old = load_bundle(bundle_dir)
    model_dir = resolve_model_dir(run)
    run_sha = check_adapter_source(run, model_dir, task, old, replace)
    model, tokenizer, _ = load_model(model_dir, [task])
    publish_task(model, tokenizer, task, bundle_dir, old.manifest, run_sha, data_dir, gate, log,
                 sign_key)
    log(f"added task '{task}' to {bundle_dir}")
    return bundle_dir


def publish_task(model, tokenizer, task: str, bundle_dir: Path, manifest: Manifest, run_sha: str,
                 data_dir: Path | None, gate: Gate, log: Log,
                 sign_key: Path | None = None) -> dict[str, Any]:
    """Stage `task` of the in-memory `model` beside the bundle (stage_task), verify it, re-sign
    when asked, and swap the stage in; returns the verification report."""
    build = staging_dir(bundle_dir)
    try:
        stage_task(model, tokenizer, task, bundle_dir, manifest, run_sha, build, log)
        report = verify_bundle(build, model, tokenizer, manifest.tokenizer.max_length, data_dir,
                               manifest.int8, gate, [task], log=log)
        if not report["passed"]:
            raise ExportError(f"{summary(report)} (the shared trunk cannot change here: a "
                              "full re-export keeps layers in float for a loss the SQNR table "
                              "points at; see --max-drop)")
        if (bundle_dir / VERIFY_FILE).is_file():
            write_json(build / VERIFY_FILE, merged_report(bundle_dir / VERIFY_FILE, report))
        remove_tree(build / ".new")
        if sign_key is not None:
            sign_bundle(build, sign_key)
        replace_dir(build, bundle_dir)
    finally:
        remove_tree(build)
    return report


def stage_task(model, tokenizer, task: str, bundle_dir: Path, manifest: Manifest, run_sha: str,
               build: Path, log: Log) -> None:
    """Fill `build` with `bundle_dir`'s files (hard links), `task`'s new files (written in
    build/.new, which is left for the caller to remove) and the manifest that lists them."""
    adapter = adapter_of(model.task_pal(task))
    manifest = manifest_with_task(manifest, model.tasks[task], run_sha, {}, adapter)
    new = write_task_files(model, tokenizer, task, manifest, build / ".new", log)
    manifest = manifest_with_task(manifest, model.tasks[task], run_sha, new, adapter,
                                  build / ".new")
    stage_bundle(bundle_dir, build, new)
    write_manifest(build, manifest)


def check_adapter_source(run: Path, model_dir: Path, task: str, bundle, replace: bool) -> str:
    """The run's trunk SHA-256, once the run may add `task` to this bundle."""
    run_sha = sha256_file(model_dir / "trunk" / TRUNK_WEIGHTS)
    bundle_sha = bundle.manifest.trunk.sha256
    if run_sha != bundle_sha:
        raise ExportError(f"{run}: its trunk {run_sha[:12]}… is not this bundle's trunk "
                          f"{bundle_sha[:12]}…; export a new bundle from that run instead")
    if task in bundle.tasks and not replace:
        raise ExportError(f"{bundle.folder}: already has task '{task}'; pass --replace to "
                          "overwrite it")
    if not (model_dir / "tasks" / task).is_dir():
        raise ExportError(f"{model_dir}: has no task '{task}' (it has: "
                          f"{', '.join(sorted(p.name for p in (model_dir / 'tasks').iterdir()))})")
    return run_sha


def write_task_files(model, tokenizer, task: str, manifest: Manifest, folder: Path,
                     log: Log) -> dict[str, str]:
    """The task's file for each runtime of the bundle, in `folder`: {bundle path: file name}."""
    folder.mkdir()
    int8 = manifest.int8
    new = {}
    columns = min(r.output_columns for r in manifest.runtimes.values())
    if model.tasks[task].num_outputs > columns:
        raise ExportError(f"task '{task}' has {model.tasks[task].num_outputs} outputs and this "
                          f"bundle's programs {columns} columns; `palkit export RUN "
                          "--overwrite` exports the bundle with the task in it")
    if "executorch" in manifest.runtimes:
        from palkit.export.executorch_export import write_task_weights
        try:
            method, inputs = manifest.executorch_method(task)
        except BundleError as e:  # a placement the program has no method for: one lowering
            raise ExportError(f"{e}: `palkit export RUN --overwrite` lowers one more method "
                              "(adding a task of a placement the bundle has needs none)") from None
        log(f"executorch: writing {task}.safetensors (no lowering: the program's {method} "
            "takes it as inputs)")
        if write_task_weights(model, task, folder / f"{task}.safetensors", int8,
                              columns) != inputs:
            raise ExportError(f"task '{task}' has other weights than this bundle's program "
                              f"takes in {method} (an older palkit?); export a new bundle with "
                              "all its tasks")
        new[f"executorch/{task}.safetensors"] = f"{task}.safetensors"
    if "onnxruntime" in manifest.runtimes:
        from palkit.export.onnx_export import write_adapter
        from palkit.export.programs import adapter_tensors, fits_graph
        pal = model.task_pal(task)
        target = manifest.onnx_graph(adapter_of(pal))  # its own placement's graph, else trunk.onnx
        graph = PalConfig.from_dict(target.pal) if target.pal is not None else None
        model_file = target.model.rpartition("/")[2]
        if not fits_graph(pal, graph):
            raise ExportError(f"task '{task}' has {adapter_text(adapter_of(pal))}, which this "
                              f"bundle's {model_file} ({graph_text(graph)}) cannot run; `palkit "
                              "export RUN --overwrite` re-exports the bundle with a graph for "
                              "all its tasks")
        if target.adapter_inputs is not None and \
                sorted(adapter_tensors(model, task, int8, graph, columns)) != \
                sorted(target.adapter_inputs):
            raise ExportError(f"this bundle's {model_file} takes other adapter inputs than this "
                              "palkit writes (exported by an older palkit?); re-export the "
                              "bundle with all its tasks")
        log(f"onnxruntime: writing {task}.onnx_adapter (no export: {model_file} takes it)")
        write_adapter(model, task, folder / f"{task}.onnx_adapter", int8, graph, columns)
        new[f"onnx/{task}.onnx_adapter"] = f"{task}.onnx_adapter"
    return new


def manifest_with_task(m: Manifest, spec, run_sha: str, new: dict[str, str],
                       adapter: dict[str, Any], folder: Path | None = None) -> Manifest:
    """The manifest with `spec`'s entry and its `new` files (in `folder`), new or replaced. The
    all-tasks method keeps its tasks: it takes their weights as inputs, so a replaced task's new
    weights apply to it (a replaced task must keep its placement: its method's inputs)."""
    in_program = [r for r in m.runtime_names
                  if m.all_tasks(r) and spec.name in m.all_tasks(r).tasks]  # type: ignore[union-attr]
    if spec.name in m.task_names and m.adapter(spec.name) != adapter and in_program:
        raise ExportError(f"task '{spec.name}' had {adapter_text(m.adapter(spec.name))} in this "
                          f"bundle's all-tasks program ({in_program[0]}), now "
                          f"{adapter_text(adapter)}; re-export the bundle with all its tasks")
    tasks = [t for t in m.tasks if t.name != spec.name]
    tasks.append(task_entry(spec, run_sha, m.runtime_names, adapter))
    files = {**m.files, **{rel: FileEntry(*file_digest(folder / name))  # type: ignore[operator]
                           for rel, name in new.items()}}
    return dataclasses.replace(m, tasks=tasks, files=files)


def stage_bundle(bundle_dir: Path, build: Path, new: dict[str, str]) -> None:
    """Fill `build` with the bundle's files (hard links: the trunk files are not rewritten) and
    the task's new files from build/.new."""
    for src in sorted(p for p in bundle_dir.rglob("*") if p.is_file()):
        rel = src.relative_to(bundle_dir).as_posix()
        # rewritten for the new bundle (model.sig too: signing must not write through a link)
        if rel in new or rel in (MANIFEST_FILE, VERIFY_FILE, SIGNATURE_FILE):
            continue
        dst = build / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dst)
    for rel, name in new.items():
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(build / ".new" / name, build / rel)


def merged_report(old_verify: Path, report: dict[str, Any]) -> dict[str, Any]:
    """The bundle's verify.json with the new task's records added (or replaced)."""
    merged = read_json(old_verify)
    for r, rr in report["runtimes"].items():
        merged.setdefault("runtimes", {}).setdefault(r, {}).setdefault("tasks", {}).update(
            rr["tasks"])
    return merged
