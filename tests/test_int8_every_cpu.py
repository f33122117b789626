"""int8 that computes the same on every CPU: the saturation probe through palkit's own ONNX Runtime
int8 graph on x86 without VNNI (qemu `-cpu Haswell`: AVX2, whose uint8 x int8 kernel adds each
pair of products in 16 bits with saturation), against the exact integer answer; and the CPU
facts results name.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from palkit.core.host import int8_features
from palkit.quant import onnx_int8, xnnpack
from palkit.quant.weights import INT16_MAX, PLAIN, ProductRanges

FULL = PLAIN  # full 8-bit ranges, as ExecuTorch keeps them: exact with VNNI only
PROBE = """
import sys
import numpy as np
import onnxruntime as ort
x = np.load(sys.argv[1])
for path in sys.argv[2:]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    np.save(path + ".out.npy", session.run(None, {"x": x})[0])
"""


def probe_graph(path: Path, ranges: ProductRanges) -> tuple[np.ndarray, np.ndarray]:
    """An 8x64 by 64x16 Linear quantized by quant/onnx_int8.py within `ranges`: half its columns
    ±1 everywhere (every weight at its largest step), half ±1 on even inputs and 0 on odd ones
    (single weights at ±weight_max); returns the stored int8 weight and its column scales."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    w = np.where(rng.random((64, 16)) < 0.5, -1.0, 1.0).astype(np.float32)
    w[1::2, 8:] = 0.0
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "probe",
                         [h.make_tensor_value_info("x", T.FLOAT, [8, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [8, 16])], [nh.from_array(w, "w")])
    fp32 = path.with_suffix(".fp32.onnx")
    onnx.save(h.make_model(graph, ir_version=9, opset_imports=[h.make_opsetid("", 17)]), str(fp32))
    onnx_int8.quantize_trunk(fp32, path, set(), ranges=ranges)
    stored = {i.name: nh.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    return stored["w/int8"].astype(np.int64), stored["w/scale"]


def exact_answer(x: np.ndarray, q: np.ndarray, w_scale: np.ndarray,
                 steps: int) -> tuple[np.ndarray, int]:
    """The int8 graph's answer in exact arithmetic from its stored integers (each row's
    asymmetric steps and zero point, the integer products summed exactly, then the two scales),
    and the largest |a1 w1 + a2 w2| of two neighbouring products in it."""
    low, high = np.minimum(x.min(1, keepdims=True), 0), np.maximum(x.max(1, keepdims=True), 0)
    scale = (high - low).astype(np.float32) / np.float32(steps)
    zero = np.round(-low / scale)
    a = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64)
    pairs = a[:, 0::2, None] * q[None, 0::2] + a[:, 1::2, None] * q[None, 1::2]
    return ((a - zero.astype(np.int64)) @ q) * scale * w_scale, int(np.abs(pairs).max())


def test_palkits_onnx_ranges_cannot_saturate_and_full_ranges_could():
    assert onnx_int8.RANGES.exact_without_vnni
    assert onnx_int8.RANGES.largest_pair_product <= INT16_MAX
    assert not FULL.exact_without_vnni and FULL.largest_pair_product == 2 * 255 * 127
    # ExecuTorch keeps full ranges: XNNPACK widens to 16 bits before multiplying on every x86
    # path, and its ARM64 int16-pair kernels need only weights above -128 (docs/int8-gate.md)
    assert xnnpack.RANGES == FULL


def test_saturation_probe_through_palkits_graph_under_qemu_haswell(tmp_path):
    from palkit.export.arch_check import ArchCheckError, host_python_under_qemu

    try:
        launcher, env = host_python_under_qemu("Haswell")
    except ArchCheckError as e:
        pytest.skip(str(e))
    rng = np.random.default_rng(1)
    x = rng.random((8, 64)).astype(np.float32)
    x[:, 0], x[:, 2:4] = 0.0, 1.0  # each row spans its full range; inputs 2 and 3 at its top
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "probe.py").write_text(PROBE)
    cases = {"full": FULL, "palkit": onnx_int8.RANGES}
    exact, largest = {}, {}
    for name, ranges in cases.items():
        q, w_scale = probe_graph(tmp_path / f"{name}.onnx", ranges)
        exact[name], largest[name] = exact_answer(x, q, w_scale, ranges.activation_steps)
    # the probe reaches each recipe's largest pair: beyond 16 bits for the full ranges, near
    # the bound for palkit's
    assert largest["full"] > INT16_MAX
    bound = onnx_int8.RANGES.largest_pair_product
    assert 0.95 * bound <= largest["palkit"] <= bound
    done = subprocess.run([*launcher, str(tmp_path / "probe.py"), str(tmp_path / "x.npy"),
                           *[str(tmp_path / f"{n}.onnx") for n in cases]],
                          capture_output=True, text=True, env={**os.environ, **env},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    error = {n: np.abs(np.load(tmp_path / f"{n}.onnx.out.npy") - exact[n]).max()
             / np.abs(exact[n]).max() for n in cases}
    # saturated pairs lose up to half the product: tens of percent of the largest output
    assert error["full"] > 0.05, error
    # palkit's ranges: only float32 rounding of the scales on an AVX2 CPU
    assert error["palkit"] < 1e-5, error


@pytest.mark.parametrize("flags, words", [
    (["avx2", "fma"], "x86-64, AVX2, no VNNI (16-bit pairs)"),
    (["avx2", "avx512bw", "avx512_vnni", "amx_int8"], "x86-64, AVX-512, AVX-512 VNNI, AMX-INT8"),
    (["avx2", "avx_vnni"], "x86-64, AVX2, AVX-VNNI"),
    (["asimd"], "aarch64, no dot product (ARMv8.0)"),
    (["asimd", "asimddp", "i8mm"], "aarch64, dot product, i8mm"),
])
def test_int8_features_say_what_the_kernels_can_do(flags, words):
    assert int8_features(flags) == words


def test_the_report_names_the_host_cpus_int8_features():
    from palkit.report.ingest import machine_label

    host = {"kind": "host", "model": "AMD EPYC", "cores_logical": 2, "cpu_flags": ["avx2", "fma"]}
    assert machine_label(host) == ("host CPU: AMD EPYC (2 cores; x86-64, AVX2, no VNNI "
                                   "(16-bit pairs))")
    del host["cpu_flags"]  # a bench file written before the flags were kept
    assert machine_label(host) == "host CPU: AMD EPYC (2 cores)"
