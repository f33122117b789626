"""An int8 bundle's ExecuTorch task files: each matrix int8 with one fp32 scale per output column,
dequantized once when a task is read, by the Python runtime and by the app's JNI alike.

The program is unchanged (its task inputs are fp32), so what is checked is the file (dtypes,
error within half a quantization step), that the runtime feeds the program exactly the
dequantized weights, that the JNI's dequantization gives the same bits, and one-line refusals.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from palkit.runtime.runners import load_executorch_program, read_task_weights
from palkit.runtime.manifest import BundleError
from palkit.export.programs import output_columns, task_tensors
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.quant.weights import quantize_rows
from palkit.trainer.checkpoint import load_model, resolve_model_dir
from testing_utils import HANG_GUARD_S

TEXT, PAIR = "the movie was good", "a man is running"
TASKS = ["sst", "sts"]


@pytest.fixture(scope="module")
def int8_bundle(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory) -> Path:
    """An int8 bundle (ExecuTorch and ONNX Runtime) of the PAL run (PALs in every layer): sst
    (one text), sts (a pair regressor). Read-only. No int8 gate: the tiny random model's sts
    scores barely vary, so their correlation with PyTorch's is noise (the gate has its own
    tests)."""
    from palkit.export.bundle import export_run
    from palkit.export.gate import Gate
    from palkit.export.options import ExportOptions
    out = tmp_path_factory.mktemp("b") / "int8"
    export_run(tiny_pal_run, out,
               ExportOptions(target="android", quant="int8", tasks=TASKS, data_dir=tiny_data,
                             gate=Gate(max_drop=None, min_agreement=-1.0, max_float_layers=0)),
               log=lambda *a: None)
    return out


@pytest.fixture(scope="module")
def model(tiny_pal_run: Path):
    return load_model(resolve_model_dir(tiny_pal_run), TASKS)[0]


def matrices(tensors: dict[str, torch.Tensor]) -> list[str]:
    return [n for n in tensors if n.endswith(".weight_t")]


def dequantized(w: torch.Tensor) -> torch.Tensor:
    """What an int8 task file should give back for the fp32 matrix w ([1, in, out])."""
    q, scale = quantize_rows(w[0].t())
    return q.t()[None].float() * scale[None, None]


@pytest.mark.slow
def test_int8_task_file_holds_int8_matrices_and_one_scale_per_column(int8_bundle, model):
    assert load_bundle(int8_bundle).manifest.int8
    for task in TASKS:
        stored = load_file(str(int8_bundle / "executorch" / f"{task}.safetensors"))
        want = task_tensors(model, task, output_columns(model))
        names = matrices(want)
        assert any(n.startswith("pal.") for n in names) and "head.out.weight_t" in names
        assert sorted(stored) == sorted([*want, *(f"{n}.scale" for n in names)])
        for name, w in want.items():
            if name not in names:  # biases and the output map: fp32, as they were
                assert stored[name].dtype == torch.float32 and torch.equal(stored[name], w), name
                continue
            q, scale = stored[name], stored[f"{name}.scale"]
            assert q.dtype == torch.int8 and q.shape == w.shape, name
            assert scale.dtype == torch.float32 and scale.shape == (1, 1, w.shape[-1]), name
            assert torch.isfinite(scale).all() and (scale > 0).all(), name
            error = (q.float() * scale - w).abs()
            assert (error <= scale * (0.5 + 1e-5)).all(), (name, (error / scale).max())
            used = w.abs().amax(dim=1, keepdim=True) > 0  # symmetric: each column's max is ±127
            assert (q.abs().amax(dim=1, keepdim=True)[used] == 127).all(), name
        # the head's padding columns (all zero) come back exactly zero
        head = stored["head.out.weight_t"].float() * stored["head.out.weight_t.scale"]
        outputs = model.tasks[task].num_outputs
        assert torch.equal(head[..., outputs:], torch.zeros_like(head[..., outputs:]))


def test_fp32_bundle_keeps_fp32_task_files(et_fp32):
    for task in TASKS:
        stored = load_file(str(et_fp32 / "executorch" / f"{task}.safetensors"))
        assert {t.dtype for t in stored.values()} == {torch.float32}
        assert not [n for n in stored if n.endswith(".scale")]


@pytest.mark.slow
def test_python_runtime_runs_exactly_the_dequantized_weights(int8_bundle, model):
    """The runtime's logits equal the same program run on weights dequantized in memory from
    the model (bit for bit), and differ from the fp32 weights' only by quantization error."""
    bundle = load_bundle(int8_bundle)
    engine = Engine(bundle, "executorch")
    section = bundle.manifest.runtimes["executorch"]
    program = load_executorch_program(int8_bundle / section.program,
                                      int8_bundle / section.trunk_data)
    forward = program.load_method("forward")
    for task in TASKS:
        spec = bundle.tasks[task]
        ids, mask, types = engine.tokenizer(TEXT, PAIR if spec.is_pair else None)
        got, _, _ = engine.run_ids(task, ids, mask, types)
        _, names = bundle.manifest.executorch_method(task)
        weights = task_tensors(model, task, output_columns(model))
        text = tuple(torch.from_numpy(x) for x in (ids, mask, types))

        def run(tensors: dict[str, torch.Tensor]) -> np.ndarray:
            return forward((*text, *(tensors[n] for n in names)))[0].numpy()[0, 0, :spec.num_outputs]  # the sentence row

        deq = {n: dequantized(w) if n in matrices(weights) else w for n, w in weights.items()}
        np.testing.assert_array_equal(got, run(deq))
        fp32 = run(weights)
        assert not np.array_equal(got, fp32)  # the weights really are int8 ones
        np.testing.assert_allclose(got, fp32, atol=0.05 * max(1.0, np.abs(fp32).max()))
    assert json.loads((int8_bundle / "verify.json").read_text())["passed"]


def _write(path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return path


@pytest.mark.parametrize("case, message", [
    ("no_scale", "holds other tensors than the bundle's program takes"),
    ("row_scale", "'w.scale' is not one float32 scale per column of 'w'"),
    ("half_scale", "'w.scale' is not one float32 scale per column of 'w'"),
    ("int16", "tensor 'w' is torch.int16, neither float32 nor int8"),
])
def test_malformed_int8_task_file_is_refused_in_one_line(tmp_path, case, message):
    q = torch.ones(1, 3, 4, dtype=torch.int8)
    scale = torch.full((1, 1, 4), 0.5)
    tensors = {"no_scale": {"w": q, "b": torch.zeros(1, 1, 4)},
               "row_scale": {"w": q, "w.scale": torch.full((1, 3, 1), 0.5),
                             "b": torch.zeros(1, 1, 4)},
               "half_scale": {"w": q, "w.scale": scale.half(), "b": torch.zeros(1, 1, 4)},
               "int16": {"w": q.to(torch.int16), "b": torch.zeros(1, 1, 4)}}[case]
    path = _write(tmp_path / "task.safetensors", tensors)
    with pytest.raises(BundleError, match="re-export the bundle") as e:
        read_task_weights(path, ["w", "b"])
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_each_output_column_has_its_own_scale(tmp_path):
    q = torch.tensor([[[1, -2], [3, 127]]], dtype=torch.int8)  # [1, in=2, out=2]
    path = _write(tmp_path / "task.safetensors",
                  {"w": q, "w.scale": torch.tensor([[[0.5, 2.0]]]), "b": torch.ones(1, 1, 2)})
    w, b = read_task_weights(path, ["w", "b"])
    assert w.dtype == torch.float32 and torch.equal(w, torch.tensor([[[0.5, -4.0], [1.5, 254.0]]]))
    assert torch.equal(b, torch.ones(1, 1, 2))


# ---- the app's native path: the JNI dequantizes to the same bits -------------------------------

def harness(build, *args) -> subprocess.CompletedProcess:
    return subprocess.run(build.command(*map(str, args)), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


@pytest.mark.slow
def test_jni_logits_equal_the_python_runtime_for_an_int8_bundle(host_build, int8_bundle):
    order = ["sst", "sts", "sst"]
    done = harness(host_build, "run", int8_bundle, 1, TEXT, PAIR, *order)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert [r["task"] for r in rows] == order
    engine = Engine(load_bundle(int8_bundle), "executorch")
    for row in rows:
        task = engine.bundle.tasks[row["task"]]
        ids, mask, types = engine.tokenizer(TEXT, PAIR if task.is_pair else None)
        expected, _, _ = engine.run_ids(task.name, ids, mask, types)
        # the same dequantization (w = q * scale in fp32) gives the program the same inputs
        np.testing.assert_array_equal(np.float32(row["logits"]), expected)


@pytest.mark.slow
def test_jni_refuses_an_int8_matrix_without_its_scale(host_build, int8_bundle, tmp_path):
    names = load_bundle(int8_bundle).manifest.runtimes["executorch"].task_inputs
    stored = load_file(str(int8_bundle / "executorch" / "sst.safetensors"))
    gone = "head.out.weight_t.scale"
    broken = _write(tmp_path / "sst.safetensors", {k: v for k, v in stored.items() if k != gone})
    done = harness(host_build, "program", int8_bundle / "executorch/trunk.pte",
                   int8_bundle / "executorch/trunk.ptd", broken, *names)
    assert done.returncode == 3, (done.returncode, done.stderr[-3000:])
    assert done.stderr.strip().splitlines()[-1].endswith(f"{broken}: has no tensor '{gone}'")


@pytest.mark.slow
def test_jni_int8_logits_on_aarch64_stay_within_the_bound(int8_bundle):
    """The phone's instruction set (issue 34): the same int8 bundle through the app's JNI path
    built for aarch64 and run under qemu, against the Python runtime on this host."""
    from palkit.android_demo.host import native_host
    from testing_utils import assert_logits_match
    from testing_utils import harness as jni_harness

    reason = native_host.missing_toolchain("aarch64")
    if reason:
        pytest.skip(reason)
    build = native_host.build("aarch64")
    done = jni_harness(build, "run", int8_bundle, 1, TEXT, PAIR, *TASKS)
    assert done.returncode == 0, done.stderr[-3000:]
    engine = Engine(load_bundle(int8_bundle), "executorch")
    for row in json.loads(done.stdout):
        task = engine.bundle.tasks[row["task"]]
        ids, mask, types = engine.tokenizer(TEXT, PAIR if task.is_pair else None)
        expected, _, _ = engine.run_ids(task.name, ids, mask, types)
        print(f"{row['task']}: largest |aarch64 - host| "
              f"{np.abs(np.float32(row['logits']) - expected).max():.3g}, "
              f"largest |logit| {np.abs(expected).max():.3g}")
        assert_logits_match(build, row["logits"], expected, quant="int8")


@pytest.mark.parametrize("arch, cpu", [("aarch64", None), ("aarch64", "cortex-a53"),
                                       ("x86_64", "Haswell")])
@pytest.mark.slow
def test_verify_arch_records_the_int8_check_on_another_cpu_in_verify_json(
        int8_bundle, tiny_pal_run, tiny_data, tmp_path, arch, cpu):
    """`palkit verify-arch` (issues 34, 43): every task's stratified dev sample on both runtimes
    on the CPU model under qemu (cortex-a76 by default on aarch64); verify.json's new section
    holds what a Python computation over the same logits (the CPU's, the host's int8, fp32)
    gives, and names the CPU's int8 features and the verifying machine's."""
    import shutil

    from palkit.android_demo.host import native_host
    from palkit.cli import main
    from palkit.core.host import int8_features
    from palkit.export.arch_check import (CPU_MODELS, ArchCheckError, dev_sample, native_logits,
                                          python_for, worker_logits)
    from palkit.export.gate import Gate
    from palkit.export.gate_stats import failure
    from palkit.export.verify import reference_batched, run_task

    reason = native_host.missing_toolchain(arch)
    try:
        python = python_for(arch, cpu or native_host.QEMU_CPU)
    except ArchCheckError as e:
        reason = reason or str(e)
    if reason:
        pytest.skip(reason)
    bundle = shutil.copytree(int8_bundle, tmp_path / "bundle")
    before = json.loads((bundle / "verify.json").read_text())
    # --max-drop 100: the tiny random model's sts scores barely vary (the fixture's note)
    assert main(["verify-arch", str(bundle), "--run", str(tiny_pal_run), "--data-dir",
                 str(tiny_data), "--max-examples", "10", "--max-drop", "100", "--arch", arch,
                 *(["--cpu", cpu] if cpu else [])]) == 0
    after = json.loads((bundle / "verify.json").read_text())
    cpu = cpu or native_host.QEMU_CPU
    record = after.pop("architectures")[f"{arch}/{cpu}"]
    assert after == before  # the export's own records are kept as they were
    assert record["cpu"] == cpu and record["cpu_int8"] == int8_features(list(CPU_MODELS[arch, cpu]))
    assert record["verifying_machine"].endswith(f"({int8_features()})")
    assert record["passed"] and sorted(record["runtimes"]) == ["executorch", "onnxruntime"]
    assert record["runtimes"]["executorch"]["launcher"].split()[-3:-1] == ["-cpu", cpu]
    assert f"-cpu {cpu}" in record["runtimes"]["onnxruntime"]["launcher"]
    build = native_host.build(arch, cpu)
    model, tokenizer, _ = load_model(resolve_model_dir(tiny_pal_run), TASKS)
    max_len = load_bundle(bundle).manifest.tokenizer.max_length
    for runtime, checked in record["runtimes"].items():
        assert sorted(checked["tasks"]) == TASKS and checked["passed"]
        engine = Engine(load_bundle(bundle), runtime)
        for name, r in checked["tasks"].items():
            spec = model.tasks[name]
            encoded, gold, source, _ = dev_sample(spec, tokenizer, max_len, tiny_data, 10)
            assert r["examples"] == len(encoded) == 10 and r["source"] == source
            other = (native_logits(build, bundle, name, encoded) if runtime == "executorch" else
                     worker_logits(*python, bundle, runtime, name, encoded)).numpy()
            host = run_task(engine, name, encoded)[0].numpy()
            fp32 = reference_batched(model, name, encoded).numpy()
            assert r["vs_host_int8"]["max_abs_diff"] == pytest.approx(np.abs(other - host).max())
            if spec.is_regression:
                pearson = np.corrcoef(other[:, 0], fp32[:, 0])[0, 1]
                assert r["vs_fp32"]["agreement"] == pytest.approx(pearson, abs=1e-6)
                continue
            assert r["vs_host_int8"]["agreement"] == np.mean(other.argmax(1) == host.argmax(1))
            assert r["vs_fp32"]["agreement"] == np.mean(other.argmax(1) == fp32.argmax(1))
            points = [100 * np.mean(x.argmax(1) == np.array(gold)) for x in (other, fp32, host)]
            assert r["vs_fp32"]["metric_change"] == pytest.approx(points[0] - points[1])
            assert r["host_int8_vs_fp32"]["metric_change"] == pytest.approx(points[2] - points[1])
            low, high = r["vs_fp32"]["metric_change_interval"]
            assert low <= r["vs_fp32"]["metric_change"] <= high
            # the record is what export's gate reads: a limit it cannot meet names the task
            label = f"{arch}/{cpu}/{runtime}/{name}"
            assert failure(r["vs_fp32"], label, True, Gate(max_drop=-101)).startswith(
                f"{label}: int8 ")


@pytest.mark.slow
def test_every_onnx_int8_matrix_keeps_neighbouring_weights_within_the_pair_bound(int8_bundle):
    """What makes ONNX Runtime's int8 exact on x86 without VNNI (docs/int8-gate.md, "Every
    CPU"): in every int8 matrix the MatMuls read, trunk and task adapters alike, each two
    neighbouring weights of an output column (inputs 2j and 2j+1, the [in, out] matrix's
    rows) sum to at most weight_pair_max."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from palkit.quant.onnx_int8 import RANGES

    graph = onnx.load(str(int8_bundle / "onnx/trunk.onnx")).graph
    read = {i for n in graph.node if n.op_type == "MatMulIntegerToFloat" for i in n.input[1:2]}
    matrices = {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.name in read}
    for task in TASKS:
        adapter = ort.AdapterFormat.read_adapter(str(int8_bundle / f"onnx/{task}.onnx_adapter"))
        matrices.update({f"{task}/{k}": v.numpy() for k, v in adapter.get_parameters().items()
                         if v.numpy().dtype == np.int8})
    assert len(matrices) > 12  # the tiny PAL model's trunk Linears and each task's PAL and head
    for name, q in matrices.items():
        a = np.abs(np.pad(q.astype(np.int64), ((0, q.shape[0] % 2), (0, 0))))
        assert (a[0::2] + a[1::2]).max() <= RANGES.weight_pair_max, name
        assert np.abs(q).max() <= RANGES.weight_max, name


@pytest.mark.slow
def test_verify_json_names_the_cpu_whose_kernels_it_measured(int8_bundle):
    from palkit.core.host import cpu_model, int8_features

    report = json.loads((int8_bundle / "verify.json").read_text())
    assert report["verifying_machine"] == f"{cpu_model()} ({int8_features()})"


@pytest.mark.slow
def test_verify_arch_without_the_cross_tools_says_what_to_fetch(int8_bundle, tiny_pal_run,
                                                                tiny_data, tmp_path,
                                                                monkeypatch, capsys):
    from palkit.android_demo.host import native_host
    from palkit.cli import main

    monkeypatch.setenv(native_host.CROSS_CACHE_ENV, str(tmp_path / "empty"))
    reason = native_host.missing_toolchain("aarch64")
    assert reason is not None
    assert main(["verify-arch", str(int8_bundle), "--run", str(tiny_pal_run),
                 "--data-dir", str(tiny_data)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: cannot run the app's native path on aarch64: {reason}"


@pytest.mark.slow
def test_verify_arch_refuses_a_task_without_dev_data(int8_bundle, tiny_pal_run, tiny_data,
                                                     tmp_path, capsys):
    import shutil

    from palkit.android_demo.host import native_host
    from palkit.cli import main

    if native_host.missing_toolchain("aarch64"):
        pytest.skip(native_host.missing_toolchain("aarch64"))
    data = shutil.copytree(tiny_data, tmp_path / "data")
    (dev,) = (data / "sts").glob("*dev*")
    dev.unlink()
    assert main(["verify-arch", str(int8_bundle), "--run", str(tiny_pal_run),
                 "--data-dir", str(data), "--runtimes", "executorch"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: task 'sts': {dev} not found; give --data-dir the folder holding every task's "
        "dev split")


@pytest.mark.slow
def test_verify_arch_refuses_a_cpu_model_it_has_no_facts_for(int8_bundle, tiny_pal_run, capsys):
    from palkit.cli import main

    assert main(["verify-arch", str(int8_bundle), "--run", str(tiny_pal_run), "--arch", "x86_64",
                 "--cpu", "Skylake"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: no int8 facts for x86_64 CPU model 'Skylake' here: choose Haswell or leave "
        "--cpu out (this host's CPU)")


def test_stratified_sample_keeps_each_label_share():
    from palkit.export.arch_check import stratified_sample

    gold = [0] * 60 + [1] * 30 + [2] * 10
    chosen = stratified_sample(gold, 20, regression=False)
    assert len(chosen) == len(set(chosen)) == 20 and chosen == sorted(chosen)
    assert [sum(gold[i] == k for i in chosen) for k in range(3)] == [12, 6, 2]
    assert chosen == stratified_sample(gold, 20, regression=False)  # fixed seed
    scores = [i / 10 for i in range(100)]
    bins = [int(scores[i] * 10) // 10 for i in stratified_sample(scores, 30, regression=True)]
    assert [bins.count(b) for b in range(10)] == [3] * 10
    assert stratified_sample(gold, None, regression=False) == list(range(100))


@pytest.mark.slow
def test_verify_arch_refuses_to_change_a_signed_bundle_without_its_key(int8_bundle, tiny_pal_run,
                                                                       tmp_path, capsys):
    import shutil

    from palkit.cli import main

    bundle = shutil.copytree(int8_bundle, tmp_path / "bundle")
    (bundle / "model.sig").write_text("{}")  # refused before the signature is even read
    before = (bundle / "verify.json").read_bytes()
    assert main(["verify-arch", str(bundle), "--run", str(tiny_pal_run)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {bundle}: signed (model.sig), and verify.json is a signed file: give "
        "--sign-key KEY to re-sign it, or --no-write")
    assert (bundle / "verify.json").read_bytes() == before
