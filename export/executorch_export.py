"""Lower a bundle's ExecuTorch/XNNPACK programs over one `trunk.ptd` and write each task's
weights file, `<task>.safetensors`.

The programs (TaskSlotProgram) take every task-specific matrix as a method input, so adding a
task writes its weights file and no program. `all_tasks.pte` is a program of its own because a
runtime plans one program's activation memory for its largest method. The trunk's constants go
to trunk.ptd, which both programs read. Design and layout: runtime/BUNDLE.md.

Lowering is single-threaded Python (most of it ExecuTorch's per-partition XNNPACK passes): a
minute or more of CPU per method for a MiniLM, the same for 3 tasks or 30.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassResult

from palkit.export.programs import TaskSlotProgram, task_tensors
from palkit.quant.weights import quantize_rows
from palkit.runtime.manifest import TEXT_INPUTS, adapter_record
from palkit.trainer.model import PalBert, PalConfig
from palkit.ui.progress import say

TRUNK_DATA = "trunk"  # -> trunk.ptd


def _owner_table(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """Placeholder name -> "trunk" | "task", from the constant's FQN or, for unnamed constants
    (quantization scales, frozen int8 weights), from a named constant used by the same ops."""
    sig = ep.graph_signature
    fqn = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
           **sig.inputs_to_lifted_tensor_constants}

    def kind(name: str) -> str | None:
        f = fqn.get(name, "")
        if f.startswith("model.trunk."):
            return "trunk"
        if f.startswith(("model.adapters.", "model.heads.")):
            return "task"
        return None

    table = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in fqn:
            continue
        found = kind(node.name)
        seen, frontier = {node}, list(node.users)
        while found is None and frontier:
            n = frontier.pop(0)
            if n in seen:
                continue
            seen.add(n)
            found = next((kind(a.name) for a in n.all_input_nodes
                          if a.op == "placeholder" and kind(a.name)), None)
            frontier.extend(n.users)
        if found:
            table[node.name] = found
    return table


def _op_name(target: Any) -> str:
    """A stable op name (str() of a Python function would embed its memory address)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return getattr(target, "__name__", type(target).__name__)


PROGRAM = "trunk"  # -> trunk.pte: the one-task methods
ONE_TASK_METHOD = "forward"
ALL_TASKS_PROGRAM = "all_tasks"  # -> all_tasks.pte: forward_all alone
ALL_TASKS_METHOD = "forward_all"


def method_name(pal: PalConfig | None, model: PalBert) -> str:
    """The one-task method of a placement: `forward` for the model's own (the launch tasks'),
    forward_head / forward_pal_<layers> for a task added later with another."""
    if adapter_of(pal) == adapter_of(model.pal):
        return ONE_TASK_METHOD
    return "forward_head" if pal is None else "forward_pal_" + "_".join(map(str, pal.layers))


def adapter_of(pal: PalConfig | None) -> dict[str, Any]:
    """What the manifest records of a task's adapter (runtime/manifest.py reads it)."""
    return adapter_record(pal.to_dict() if pal is not None else None)


def lower_trunk_program(model: PalBert, all_tasks: list[str] | None, out_dir: Path, int8: bool,
                        max_len: int, calibration: list[tuple[torch.Tensor, ...]], columns: int,
                        log: Callable[[str], None] = say) -> dict[str, Any]:
    """Write out_dir/trunk.pte (a one-task method per placement among the model's tasks,
    method_name) and out_dir/trunk.ptd; when `all_tasks` lists several (grouped by placement,
    export_order), also out_dir/all_tasks.pte over the same trunk.ptd. Calibration runs with the
    model's own task weights. Returns "non_delegated_ops", the `forward` method's task input
    names in method order ("task_inputs") and the other one-task methods ("methods": name ->
    adapter record and task input names)."""
    placements = {method_name(model.task_pal(t), model): t for t in model.tasks}
    if ONE_TASK_METHOD not in placements:
        raise ValueError("no task has the model's own placement (load models with load_model)")
    weights = {t: task_tensors(model, t, columns)
               for t in {*placements.values(), *(all_tasks or [])}}
    methods, inputs = {}, {}
    for name in sorted(placements, key=lambda m: m != ONE_TASK_METHOD):
        task = placements[name]
        program = TaskSlotProgram(model, [(model.task_pal(task), 1)], columns)
        inputs[name] = program.input_names()
        methods[name] = (program, [x + tuple(weights[task][k] for k in inputs[name])
                                   for x in calibration])
    log(f"executorch: lowering {PROGRAM}.pte ({', '.join(methods)})")
    facts = lower_methods(methods, PROGRAM, out_dir, int8, max_len)
    if all_tasks and len(all_tasks) > 1:
        groups = model.placement_groups(all_tasks)
        if [t for g in groups for t in g] != list(all_tasks):
            raise ValueError(f"all-tasks order {all_tasks} is not grouped by placement")
        program = TaskSlotProgram(model, [(model.task_pal(g[0]), len(g)) for g in groups], columns)
        # each input of a group: its tasks' slices stacked, in task order
        stacked = [torch.cat([weights[t][k] for t in group])
                   for g, group in enumerate(groups) for k in program.input_names(g)]
        log(f"executorch: lowering {ALL_TASKS_PROGRAM}.pte ({ALL_TASKS_METHOD})")
        lower_beside({ALL_TASKS_METHOD: (program, [x + tuple(stacked) for x in calibration])},
                     ALL_TASKS_PROGRAM, out_dir, int8, max_len)
    others = {name: {"adapter": adapter_of(model.task_pal(task)), "task_inputs": inputs[name]}
              for name, task in placements.items() if name != ONE_TASK_METHOD}
    return {**facts, "task_inputs": inputs[ONE_TASK_METHOD], "methods": others}


def lower_beside(methods: dict[str, tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]],
                 name: str, out_dir: Path, int8: bool, max_len: int) -> None:
    """Another program, out_dir/<name>.pte, over the trunk.ptd already in out_dir: lowered in a
    staging folder and kept only if the trunk data it needs is that file, byte for byte (the
    trunk's constants are quantized and keyed the same whichever method uses them)."""
    staging = out_dir / f".{name}"
    try:
        lower_methods(methods, name, staging, int8, max_len)
        ptd = f"{TRUNK_DATA}.ptd"
        if (staging / ptd).read_bytes() != (out_dir / ptd).read_bytes():
            raise RuntimeError(f"{name}.pte needs other trunk data than {PROGRAM}.pte; please "
                               "report this")
        (staging / f"{name}.pte").replace(out_dir / f"{name}.pte")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def export_order(model: PalBert, tasks: list[str]) -> list[str]:
    """`tasks` with each placement's tasks together (in order of first appearance): the order
    of a bundle's tasks and of its all-tasks method's rows."""
    return [t for group in model.placement_groups(tasks) for t in group]


def write_task_weights(model: PalBert, task: str, path: Path, int8: bool,
                       columns: int) -> list[str]:
    """The task's weights file (safetensors: readable without Python): the trunk program's task
    inputs for this task, by name. Returns the names in method order. In an int8 bundle each
    matrix (`….weight_t`, [1, in, out]) is stored int8 under its own name with one fp32 scale per
    output column in `….weight_t.scale` ([1, 1, out]); biases and the output map stay fp32. The
    runtimes dequantize once when they read the file (w = q * scale): the method still takes
    fp32, since XNNPACK packs int8 weights only for constants, not inputs."""
    from safetensors.torch import save_file

    tensors = task_tensors(model, task, columns)
    stored = dict(tensors)
    if int8:
        for name, w in tensors.items():
            if name.endswith(".weight_t"):
                q, scale = quantize_rows(w[0].t())  # rows of [out, in]: one per output column
                stored[name] = q.t().contiguous()[None]
                stored[f"{name}.scale"] = scale[None, None].contiguous()
    save_file(stored, str(path))
    return list(tensors)


def infer_sequence_size(gm: torch.fx.GraphModule) -> PassResult:
    """An edge pass: spell a reshape's one symbolic size (the sequence length) as -1,
    view_copy(x, [1, s, 12, 32]) -> view_copy(x, [1, -1, 12, 32]). XNNPACK lowers a reshape
    with one inferred size but not one with a symbolic size (ViewCopyConfig), so without this
    every reshape in attention splits the delegate and runs as a portable op."""
    from executorch.exir.dialects._ops import ops as exir_ops

    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target != exir_ops.edge.aten.view_copy.default:
            continue
        shape = list(node.args[1])
        symbolic = [i for i, d in enumerate(shape) if not isinstance(d, int)]
        if len(symbolic) == 1 and -1 not in shape:
            shape[symbolic[0]] = -1
            node.args = (node.args[0], shape, *node.args[2:])
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


def export_method(program: torch.nn.Module, calibration: list[tuple[torch.Tensor, ...]],
                  seq: Any, int8: bool) -> tuple[Any, dict[str, str]]:
    """One method exported with a dynamic sequence length (the text inputs' dim 1; further
    inputs keep their shapes), int8 embeddings and linears when `int8`, and its trunk
    constants tagged into trunk.ptd; returns it and its constants' owners."""
    from palkit.quant import xnnpack as q

    program = program.eval()
    if int8:
        q.quantize_embeddings(program)
    example, n = calibration[0], len(TEXT_INPUTS)
    # the converted module that pt2e re-exports takes its inputs flat; the program itself takes
    # a TaskSlotProgram's *tensors (static shapes) as one group
    flat = tuple({1: seq} if i < n else None for i in range(len(example)))
    dynamic = (*flat[:n], flat[n:]) if len(example) > n else flat
    with torch.no_grad():
        ep = torch.export.export(program, example, dynamic_shapes=dynamic)
        if int8:
            ep = q.quantize_linears_pt2e(ep, calibration, flat)
    owners = _owner_table(ep)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and owners.get(node.name) == "trunk":
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = TRUNK_DATA
    return ep, owners


def lower_methods(methods: dict[str, tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]],
                  name: str, out_dir: Path, int8: bool, max_len: int) -> dict[str, Any]:
    """Each method ({method: (module, calibration inputs)}) exported (export_method), then
    XNNPACK partitioning and one ExecuTorch program holding every method (constants the methods
    share are stored once). Writes out_dir/<name>.pte and out_dir/trunk.ptd; returns the ops the
    first method leaves out of the delegate ("non_delegated_ops")."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (EdgeCompileConfig, ExecutorchBackendConfig,
                                 to_edge_transform_and_lower)
    from executorch.exir.passes import MemoryPlanningPass

    seq = torch.export.Dim("seq", min=2, max=max_len)
    eps, owners = {}, {}
    for method, (program, calibration) in methods.items():
        eps[method], owners[method] = export_method(program, calibration, seq, int8)
    owned = {n: o for table in owners.values() for n, o in table.items()}

    def external(node: torch.fx.Node) -> str | None:
        # Non-delegated constants (embeddings, LayerNorm): trunk-owned tables go to trunk.ptd;
        # scalars and task constants stay in the .pte.
        val = node.meta.get("val")
        big = val is not None and getattr(val, "numel", lambda: 0)() > 1
        is_trunk = node.name.startswith("p_model_trunk_") or owned.get(node.name) == "trunk"
        return TRUNK_DATA if big and is_trunk else None

    edge = to_edge_transform_and_lower(eps, transform_passes=[infer_sequence_size],
                                       partitioner=[XnnpackPartitioner()],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    # Inputs not memory-planned: the method reads the caller's tensors in place, so a task's
    # weights (method inputs) are bound once per swap, never copied per call.
    et = edge.to_executorch(ExecutorchBackendConfig(
        external_constants=external, do_quant_fusion_and_const_prop=int8,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{name}.pte", "wb") as f:
        et.write_to_file(f)
    et.write_tensor_data_to_file(str(out_dir))
    extra = sorted(set(os.listdir(out_dir)) - {f"{name}.pte", f"{TRUNK_DATA}.ptd"})
    if extra:
        raise RuntimeError(f"unexpected ExecuTorch data files {extra}: only {TRUNK_DATA}.ptd "
                           "is supported")
    # the ops left to portable kernels (getitem only unpacks a delegate's outputs)
    gm = edge.exported_program(next(iter(methods))).graph_module
    ops = {_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    return {"non_delegated_ops": sorted(op for op in ops
                                        if "delegate" not in op and "getitem" not in op)}
