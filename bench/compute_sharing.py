"""Side-by-side measurement of export-time fusion (docs/compute-sharing.md has the results).

    python -m bench.compute_sharing lower RUN OUT [--task sst] [--only NAME,...]
    python -m bench.compute_sharing time OUT [--seq 128] [--threads 1] [--seconds 60]

`lower` writes OUT/<variant>/<variant>.pte (+ its trunk.ptd) and OUT/<variant>.json (how
ExecuTorch partitioned it) for each variant: `plain` (the run's trunk and the task's head, no
PALs), `task` (one task's program) and `all` (the all-tasks program) as export lowers them, and
with fuse_for_inference's options: `-fused` (query/key/value as one Linear in every attention;
for `all` also the tasks' PALs stacked), `-fold` (and V^E composed in), `task-foldsep` (V^E
composed into separate query/key/value), `all-stacked` (stacked PALs only), `-prescaled` (the
scores' 1/sqrt(head_dim) folded into every query, nothing else).
`plain-customsdpa` runs every attention through ExecuTorch's fused CPU kernel
`llama::custom_sdpa` (portable, outside the XNNPACK delegate; batch 1), swapped in while the
program is lowered, as export/onnx_ops.py swaps in ONNX Runtime's kernel.
`time` loads every variant in one process and times them in interleaved rounds (int8,
XNNPACK; every OUT/*/<name>.pte, so variants lowered by an older checkout can be timed beside
them), so that a slow spell of a shared machine lands on all of them alike.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

VARIANTS = ("plain", "plain-fused", "plain-prescaled", "plain-customsdpa", "task", "task-fused",
            "task-fold", "task-foldsep", "task-prescaled", "all", "all-fused", "all-fold",
            "all-stacked", "all-prescaled")


def custom_sdpa_attention(q, k, v, heads, mask, dropout_p, training, scale=None):
    """trainer.model.multi_head_attention's math through llama::custom_sdpa: [b, s, heads, d]
    in and out, the one-row additive mask spread to the [s, s] matrix the kernel takes."""
    b, s, width = q.shape
    d = width // heads
    split = [x.reshape(b, -1, heads, d).contiguous() for x in (q, k, v)]
    square = mask.reshape(1, -1).expand(s, -1).contiguous()
    out = torch.ops.llama.custom_sdpa(*split, 0, square, 0.0, False,
                                      d ** -0.5 if scale is None else scale)
    return out.reshape(b, -1, width)


@contextmanager
def custom_sdpa() -> Iterator[None]:
    """While lowering: every attention as llama::custom_sdpa (the op registered by importing
    ExecuTorch's LLM custom ops, which the timing process imports too)."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers the op)
    import trainer.model as model_code

    written_out = model_code.multi_head_attention
    model_code.multi_head_attention = custom_sdpa_attention
    try:
        yield
    finally:
        model_code.multi_head_attention = written_out


def fused(program: nn.Module, **options: bool) -> nn.Module:
    """The program with its own model copy replaced by fuse_for_inference's (same outputs)."""
    from trainer.model import fuse_for_inference

    program.model = fuse_for_inference(program.model, **options)
    return program


def programs(model, task: str, only: list[str]) -> dict[str, nn.Module]:
    from export.programs import AllTasksProgram, TaskProgram

    plain = copy.copy(model)
    plain._modules = dict(model._modules)
    plain.pal, plain.adapters = None, nn.ModuleDict()
    tasks = list(model.tasks)
    make = {
        "plain": lambda: TaskProgram(plain, task),
        "plain-fused": lambda: fused(TaskProgram(plain, task)),
        "task": lambda: TaskProgram(model, task),
        "task-fused": lambda: fused(TaskProgram(model, task)),
        "task-fold": lambda: fused(TaskProgram(model, task), fold=True),
        "task-foldsep": lambda: fused(TaskProgram(model, task), qkv=False, fold=True),
        "all": lambda: AllTasksProgram(model, tasks),
        "all-fused": lambda: fused(AllTasksProgram(model, tasks)),
        "all-fold": lambda: fused(AllTasksProgram(model, tasks), fold=True),
        "all-stacked": lambda: fused(AllTasksProgram(model, tasks), qkv=False),
        "plain-prescaled": lambda: fused(TaskProgram(plain, task), qkv=False, prescale=True),
        "plain-customsdpa": lambda: TaskProgram(plain, task),
        "task-prescaled": lambda: fused(TaskProgram(model, task), qkv=False, prescale=True),
        "all-prescaled": lambda: fused(AllTasksProgram(model, tasks), qkv=False, stack=False,
                                       prescale=True),
    }
    return {name: make[name]() for name in only}


def lower(run: Path, out: Path, task: str, only: list[str]) -> None:
    from export.bundle import calibration_inputs
    from export.executorch_export import lower_program
    from trainer.checkpoint import load_model, resolve_model_dir

    model, tokenizer, _ = load_model(resolve_model_dir(run))
    calib = calibration_inputs(model, 128, tokenizer)
    for name, program in programs(model, task, only).items():
        with custom_sdpa() if name.endswith("-customsdpa") else nullcontext():
            facts = lower_program(program, name, out / name, True, 128, calib)
        (out / f"{name}.json").write_text(json.dumps(facts, indent=1))
        print(name, {k: v for k, v in facts.items() if k != "non_delegated_ops"}, flush=True)


def time_all(out: Path, seq: int, threads: int, seconds: float) -> dict[str, dict[str, float]]:
    from bench.worker import time_interleaved
    from export.engines import executorch_lib

    lib = executorch_lib()
    if any(out.glob("*-customsdpa/*.pte")):
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (its kernel)
    lib._unsafe_reset_threadpool(threads)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (1, seq), generator=g)
    types = torch.zeros(1, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    args = (ids, torch.ones(1, seq, dtype=torch.long), types)
    fns, keep = {}, []
    for pte in sorted(out.glob("*/*.pte")):
        name = pte.stem
        program = lib._load_program(str(pte), data_path=str(pte.parent / "trunk.ptd"))
        method = program.load_method("forward")
        keep.append((program, method))
        fns[name] = lambda m=method: m(args)
    samples = time_interleaved(fns, warmup=3, runs=20, min_seconds=seconds, max_seconds=seconds)
    return {n: {"p50_ms": round(statistics.median(v), 2), "runs": len(v),
                "p10_ms": round(float(np.percentile(v, 10)), 2)} for n, v in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lo = sub.add_parser("lower")
    lo.add_argument("run", type=Path)
    lo.add_argument("out", type=Path)
    lo.add_argument("--task", default="sst")
    lo.add_argument("--only", default=",".join(VARIANTS))
    ti = sub.add_parser("time")
    ti.add_argument("out", type=Path)
    ti.add_argument("--seq", type=int, default=128)
    ti.add_argument("--threads", type=int, default=1)
    ti.add_argument("--seconds", type=float, default=60)
    a = p.parse_args()
    if a.cmd == "lower":
        lower(a.run, a.out, a.task, a.only.split(","))
    else:
        result = time_all(a.out, a.seq, a.threads, a.seconds)
        print(json.dumps(result, indent=1))
        (a.out / f"timing-{a.seq}-{a.threads}t.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
