"""What machine the host numbers come from, and its matrix-multiply ceiling.

The ceiling is measured, not looked up: the best of a few GEMM shapes that occur in the model
(and one large square), fp32 through torch.mm and int8 through torch._int_mm and ONNX Runtime's
MatMulInteger. It runs inside a bench worker process with a fixed thread count.
"""
from __future__ import annotations

import os
import platform
import time
from typing import Any

import psutil

from palkit.core.host import cpu_flags, cpu_model


def host_machine() -> dict[str, Any]:
    return {
        "kind": "host",
        "model": cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_flags": cpu_flags(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_avg_1min_at_start": os.getloadavg()[0],
    }


def _best_rate(fn, flops: int, min_seconds: float) -> float:
    """Best-of-batches rate in FLOP/s (a busy machine only ever makes a batch slower)."""
    fn()
    best, reps, start = float("inf"), 1, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dt = (time.perf_counter() - t0) / reps
        best = min(best, dt)
        if dt * reps < 0.02:
            reps *= 2
        if time.perf_counter() - start > min_seconds:
            return flops / best


SHAPES = ((128, 384, 1536), (128, 1536, 384), (128, 384, 384), (512, 512, 512))


def measure_ceiling(threads: int, min_seconds: float = 0.5) -> dict[str, Any]:
    """GFLOP/s (fp32) and GOP/s (int8) per method; `best` of each is the ceiling used."""
    import numpy as np
    import torch
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail as OrtFail
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

    torch.set_num_threads(threads)
    out: dict[str, Any] = {"threads": threads, "shapes": [list(s) for s in SHAPES],
                           "fp32_gflops": {}, "int8_gops": {}}
    for m, k, n in SHAPES:
        flops = 2 * m * k * n
        a, b = torch.randn(m, k), torch.randn(k, n)
        out["fp32_gflops"][f"torch.mm {m}x{k}x{n}"] = _best_rate(lambda: a @ b, flops,
                                                                  min_seconds) / 1e9
        ai = torch.randint(-128, 127, (m, k), dtype=torch.int8)
        bi = torch.randint(-128, 127, (k, n), dtype=torch.int8)
        try:
            out["int8_gops"][f"torch._int_mm {m}x{k}x{n}"] = _best_rate(
                lambda: torch._int_mm(ai, bi), flops, min_seconds) / 1e9
        except RuntimeError as e:  # _int_mm refuses some shapes on some CPUs
            out.setdefault("errors", []).append(f"torch._int_mm: {e}".splitlines()[0])
        try:
            sess = _ort_matmul_integer(threads, k, n)
            feeds = {"A": np.random.randint(0, 255, (m, k), dtype=np.uint8)}
            out["int8_gops"][f"ort MatMulInteger {m}x{k}x{n}"] = _best_rate(
                lambda: sess.run(None, feeds), flops, min_seconds) / 1e9
        except (OrtFail, OrtNotImplemented) as e:  # an ORT build without the kernel: say so
            out.setdefault("errors", []).append(f"ort MatMulInteger: {e}".splitlines()[0])
    out["fp32_gflops_best"] = max(out["fp32_gflops"].values())
    out["int8_gops_best"] = max(out["int8_gops"].values()) if out["int8_gops"] else None
    return out


def _ort_matmul_integer(threads: int, k: int, n: int):
    """A one-node ONNX graph: uint8 activations x constant int8 weights -> int32, the GEMM
    quantize_dynamic produces (a constant B lets ORT pre-pack it, as in a real model)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.randint(-128, 127, (k, n), dtype=np.int8), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, ["m", k])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, ["m", n])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
