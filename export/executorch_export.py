"""Lower a program to ExecuTorch/XNNPACK: `<task>.pte` (one task) or `_all_tasks.pte` (every
task on one input), plus the shared `trunk.ptd`.

Every constant the trunk owns (XNNPACK-packed linear weights and the non-delegated embedding and
LayerNorm tables) is tagged into the external file "trunk"; XNNPACK keys its data by content hash,
so trunk.ptd comes out byte-identical for every task of the same trunk and quantization. The
task's PAL and head weights stay inside its .pte.

Lowering is single-threaded Python (most of it ExecuTorch's per-partition XNNPACK passes) and
takes a minute or more of CPU per program for a MiniLM; `lower_programs` lowers a bundle's
programs side by side in worker processes, each byte-identical to lowering it in this process.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassResult

from export.programs import TEXT_INPUTS, AllTasksProgram, TaskProgram
from trainer.model import PalBert
from ui.progress import say

TRUNK_DATA = "trunk"  # -> trunk.ptd
# Task names start with a letter or digit (trainer/tasks.py), so this file name cannot clash.
ALL_TASKS_PROGRAM = "_all_tasks"
# Each worker holds a model copy and its lowering (about 1.7 GB at peak for MiniLM).
MAX_WORKERS = 4


def example_inputs(seq: int, vocab: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (1, seq), generator=g)
    types = torch.zeros(1, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    return ids, torch.ones(1, seq, dtype=torch.long), types


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
            for a in n.all_input_nodes:
                if a.op == "placeholder" and kind(a.name):
                    found = kind(a.name)
                    break
            frontier.extend(n.users)
        if found:
            table[node.name] = found
    return table


def _op_name(target: Any) -> str:
    """A stable op name (str() of a Python function would embed its memory address)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    return getattr(target, "__name__", type(target).__name__)


def lower_task(model: PalBert, task: str, out_dir: Path, int8: bool, max_len: int,
               calibration: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    """Write out_dir/<task>.pte and out_dir/trunk.ptd; return facts for the manifest."""
    return lower_program(TaskProgram(model, task), task, out_dir, int8, max_len, calibration)


def lower_all_tasks(model: PalBert, tasks: list[str], out_dir: Path, int8: bool, max_len: int,
                    calibration: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    """Write out_dir/_all_tasks.pte (outputs in `tasks` order) and out_dir/trunk.ptd."""
    return lower_program(AllTasksProgram(model, tasks), ALL_TASKS_PROGRAM, out_dir, int8,
                         max_len, calibration)


def lower_named(model: PalBert, name: str, tasks: list[str], out_dir: Path, int8: bool,
                max_len: int, calibration: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    """One program by its bundle name: ALL_TASKS_PROGRAM over `tasks`, else the task `name`."""
    if name == ALL_TASKS_PROGRAM:
        return lower_all_tasks(model, tasks, out_dir, int8, max_len, calibration)
    if tasks != [name]:
        raise ValueError(f"the program '{name}' holds only its own task, not {tasks}")
    return lower_task(model, name, out_dir, int8, max_len, calibration)


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def lower_programs(model: PalBert, programs: dict[str, list[str]], out_root: Path, int8: bool,
                   max_len: int, calibration: list[tuple[torch.Tensor, ...]],
                   workers: int | None = None,
                   log: Callable[[str], None] = say) -> dict[str, dict[str, Any]]:
    """Lower every program ({bundle name: its tasks}) into out_root/<name>/ (<name>.pte and
    trunk.ptd); returns lower_named's facts by name. With more than one worker (default: one per
    usable CPU, at most MAX_WORKERS) the programs are lowered in parallel processes, the largest
    first."""
    order = sorted(programs, key=lambda n: -len(programs[n]))
    workers = min(len(order), workers or min(usable_cpus(), MAX_WORKERS))
    if workers <= 1:
        facts = {}
        for name in order:
            log(f"executorch: lowering {name}")
            facts[name] = lower_named(model, name, programs[name], out_root / name, int8,
                                      max_len, calibration)
        return {name: facts[name] for name in programs}
    log(f"executorch: lowering {len(order)} programs in {workers} processes")
    # spawn, not fork: a forked child of a process whose torch thread pool has started can hang.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker, initargs=(model,)) as pool:
        jobs = {pool.submit(_lower_in_worker, name, programs[name], out_root / name, int8,
                            max_len, calibration): name for name in order}
        facts = {}
        for job in as_completed(jobs):
            facts[jobs[job]] = job.result()
            log(f"executorch: lowered {jobs[job]} ({len(facts)}/{len(order)})")
    return {name: facts[name] for name in programs}


_worker_model: PalBert | None = None  # set once per worker process by _start_worker


def _start_worker(model: PalBert) -> None:
    global _worker_model
    torch.set_num_threads(1)  # one process per CPU already; more threads only contend
    _worker_model = model


def _lower_in_worker(name: str, tasks: list[str], out_dir: Path, int8: bool, max_len: int,
                     calibration: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    assert _worker_model is not None, "_start_worker did not run in this process"
    return lower_named(_worker_model, name, tasks, out_dir, int8, max_len, calibration)


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


def lower_program(program: torch.nn.Module, name: str, out_dir: Path, int8: bool, max_len: int,
                  calibration: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    """The lowering steps, one after the other: int8 embeddings, export with a dynamic sequence
    length, int8 linears (pt2e), trunk constants tagged into trunk.ptd, XNNPACK partitioning,
    ExecuTorch program; writes out_dir/<name>.pte and out_dir/trunk.ptd."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (EdgeCompileConfig, ExecutorchBackendConfig,
                                 to_edge_transform_and_lower)

    from quant import xnnpack as q

    program = program.eval()
    if int8:
        q.quantize_embeddings(program)
    seq = torch.export.Dim("seq", min=2, max=max_len)
    dynamic = {text: {1: seq} for text in TEXT_INPUTS}
    example = calibration[0]
    with torch.no_grad():
        ep = torch.export.export(program, example, dynamic_shapes=dynamic)
        if int8:
            ep = q.quantize_linears_pt2e(ep, calibration, dynamic)
    owners = _owner_table(ep)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and owners.get(node.name) == "trunk":
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = TRUNK_DATA

    def external(node: torch.fx.Node) -> str | None:
        # Non-delegated constants (embeddings, LayerNorm): trunk-owned tables go to trunk.ptd;
        # scalars and task constants stay in the .pte.
        val = node.meta.get("val")
        big = val is not None and getattr(val, "numel", lambda: 0)() > 1
        is_trunk = node.name.startswith("p_model_trunk_") or owners.get(node.name) == "trunk"
        return TRUNK_DATA if big and is_trunk else None

    edge = to_edge_transform_and_lower(ep, transform_passes=[infer_sequence_size],
                                       partitioner=[XnnpackPartitioner()],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    et = edge.to_executorch(ExecutorchBackendConfig(external_constants=external,
                                                    do_quant_fusion_and_const_prop=int8))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{name}.pte", "wb") as f:
        et.write_to_file(f)
    et.write_tensor_data_to_file(str(out_dir))
    extra = sorted(set(os.listdir(out_dir)) - {f"{name}.pte", f"{TRUNK_DATA}.ptd"})
    if extra:
        raise RuntimeError(f"unexpected ExecuTorch data files {extra}: only {TRUNK_DATA}.ptd "
                           "is supported")
    return delegation_facts(edge.exported_program().graph_module)


def delegation_facts(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """How the lowered graph is partitioned (ExecuTorch's get_delegation_info): XNNPACK delegate
    segments, and the ops left to portable kernels (getitem, which only unpacks a delegate's
    outputs, is not counted)."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(gm)
    kept = {op: b.non_delegated for op, b in info.delegation_by_operator.items()
            if b.non_delegated and op != "getitem"}
    ops = sorted({_op_name(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and "delegate" not in _op_name(n.target)
                  and "getitem" not in _op_name(n.target)})
    return {"non_delegated_ops": ops, "delegate_segments": info.num_delegated_subgraphs,
            "delegated_nodes": info.num_delegated_nodes, "non_delegated_nodes": sum(kept.values()),
            "non_delegated_by_op": dict(sorted(kept.items()))}
