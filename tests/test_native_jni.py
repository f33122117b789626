"""The Android app's native ExecuTorch path, built and run on this machine.

android_demo/host/native_host.py compiles the app's own JNI source against the executorch wheel's
C++ SDK, and the app's Java (core + io.palkit.demo.runtime) with a small harness. The harness
does what the app does: the core checks the manifest and every file and tokenizes, then the
bundle's one program is opened with its trunk.ptd through Module(program, {trunk.ptd}, Mmap) and
each task's weights file is read once and passed as the method's task inputs.
Every call runs in a child JVM, so a native crash fails a test instead of killing pytest.
With a trusted key (--trust-key, as the app's assets/trusted_key.pem) the signature is
checked first: an untrusted bundle is refused and the JNI library is never loaded.
Every test that runs the JNI runs twice: on this host's architecture, and on aarch64 (the
phone's) built with the cross compiler against executorch's aarch64 wheel and run on an aarch64
JRE under qemu (android_demo/host/native_host.py). Skipped, with the reason, where a build's
tools are missing (no C++ compiler or JDK; for aarch64 the Debian cross packages or the fetched
wheels).
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from palkit.android_demo.host import native_host
from palkit.bench.native import NativePathError, measure_native
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.signing import SIGNATURE_FILE, generate_keypair, sign_bundle
from testing_utils import REPO, assert_logits_match, harness

TEXT, PAIR = "the movie was good", "a man is running"
TASKS = ["sst", "sts"]  # one single-text classifier, one pair regressor: both input layouts


@pytest.fixture(scope="module")
def et_bundle(et_fp32: Path) -> Path:
    """One program over trunk.ptd and two task weights files (sst, sts); the app does not use
    the all-tasks method."""
    return et_fp32


@pytest.fixture(scope="module")
def other_trunk(tiny_pal_run, tmp_path_factory) -> Path:
    """trunk.pte + trunk.ptd + sst.safetensors exported from the same run with a different trunk
    (weights moved)."""
    from palkit.export.bundle import calibration_inputs, default_max_len
    from palkit.export.executorch_export import lower_trunk_program, write_task_weights
    from palkit.export.programs import output_columns
    from palkit.trainer.checkpoint import load_model, resolve_model_dir

    model, tokenizer, _ = load_model(resolve_model_dir(tiny_pal_run), ["sst"])
    with torch.no_grad():
        for p in model.trunk.parameters():
            p.add_(0.01)
    out = tmp_path_factory.mktemp("other-trunk")
    max_len = default_max_len(model)
    lower_trunk_program(model, None, out, False, max_len,
                        calibration_inputs(model, max_len, tokenizer), output_columns(model),
                        log=lambda *a: None)
    write_task_weights(model, "sst", out / "sst.safetensors", False, output_columns(model))
    return out


def probe(build, program: Path, data: Path, weights: Path, bundle: Path, **kwargs):
    """The raw runtime: one program, one data file, one task's weights (in the bundle's input
    order), no manifest checks."""
    names = load_bundle(bundle).manifest.runtimes["executorch"].task_inputs
    return harness(build, "program", program, data, weights, *names, **kwargs)


def refusal(done: subprocess.CompletedProcess) -> str:
    """The one-line refusal; a crash (signal, abort) or a success fails the test here."""
    assert done.returncode == 3, (f"expected a refusal (exit 3), got {done.returncode}:\n"
                                  f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return done.stderr.strip().splitlines()[-1]


def test_jni_logits_match_the_python_runtime_for_every_task_and_swap(native_build, et_bundle):
    order = ["sst", "sts", "sst", "sts", "sts"]  # a swap each way, and a repeat
    done = harness(native_build, "run", et_bundle, 1, TEXT, PAIR, *order)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert [r["task"] for r in rows] == order
    # The thread count reached the real threadpool library (ExecuTorch logs the reset): the
    # declarations that stand in for the header the wheel lacks link to its symbols.
    assert "Resetting threadpool to 1 threads" in done.stderr
    engine = Engine(load_bundle(et_bundle), "executorch")
    for row in rows:
        task = engine.bundle.tasks[row["task"]]
        ids, mask, types = engine.tokenizer(TEXT, PAIR if task.is_pair else None)
        assert row["input_ids"] == ids[0].tolist() and row["token_type_ids"] == types[0].tolist()
        expected, _, _ = engine.run_ids(task.name, ids, mask, types)
        assert len(row["logits"]) == task.num_outputs
        assert_logits_match(native_build, row["logits"], expected)
    sst = [r["logits"] for r in rows if r["task"] == "sst"]
    assert sst[0] == sst[1]  # swapping away and back changes nothing


@pytest.mark.slow
def test_program_with_another_trunks_data_is_refused(native_build, et_bundle, other_trunk):
    ok = probe(native_build, other_trunk / "trunk.pte", other_trunk / "trunk.ptd",
               other_trunk / "sst.safetensors", et_bundle)
    assert ok.returncode == 0, ok.stderr[-3000:]  # the other trunk's own pair loads
    message = refusal(probe(native_build, et_bundle / "executorch/trunk.pte",
                            other_trunk / "trunk.ptd", et_bundle / "executorch/sst.safetensors",
                            et_bundle))
    assert message.startswith("refused: ExecuTorch could not load forward() of")
    assert "trunk.ptd" in message and "Error::" in message


def test_truncated_trunk_data_is_refused_by_the_runtime_and_by_the_core(native_build,
                                                                       et_bundle, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(et_bundle, bundle)
    trunk = bundle / "executorch/trunk.ptd"
    data = trunk.read_bytes()
    for keep in (len(data) // 2, 16):  # the data cut short; the header itself cut short
        trunk.write_bytes(data[:keep])
        message = refusal(probe(native_build, bundle / "executorch/trunk.pte", trunk,
                                bundle / "executorch/sst.safetensors", et_bundle))
        assert "could not load forward()" in message and "Error::" in message, message
    # Through the app's own path the core refuses first, naming the file, before any native code.
    message = refusal(harness(native_build, "run", bundle, 1, TEXT, PAIR, "sst"))
    assert "executorch/trunk.ptd is 16 bytes, manifest says" in message


def test_bench_reports_latency_and_memory_of_every_task(host_build, et_bundle):
    result = measure_native(et_bundle, seq_len=16, threads=1, runs=3, warmup=1)
    assert result["subject"] == "executorch C++, the app's native path"
    assert (result["seq_len"], result["threads"], result["tasks"]) == (16, 1, TASKS)
    assert [r["config"] for r in result["rows"]] == ["task:sst", "task:sts", "all_tasks"]
    for row in result["rows"]:
        assert 0 < row["min_ms"] <= row["p50_ms"] <= row["p90_ms"] and row["runs"] == 3
    assert all(v > 0 for v in result["rss_bytes"].values())
    assert set(result["rss_bytes"]) == {"runtime_loaded", "one_task", "all_tasks", "after_runs"}
    assert result["first_load_and_run_ms"] > result["open_ms"] > 0
    assert set(result["swap_and_run_ms"]) == set(result["swap_ms"]) == {"sts"}
    # every task's weights were bound when the bundle opened: a swap reads nothing
    assert result["swap_ms"]["sts"] < result["swap_and_run_ms"]["sts"]


@pytest.mark.parametrize("gone, reason", [({"javac"}, "needs a JDK"),
                                          ({"c++", "g++"}, "no C++ compiler")])
def test_without_a_jdk_or_compiler_the_reason_is_named(monkeypatch, tmp_path, gone, reason):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name in gone else real_which(name))
    assert reason in native_host.missing_toolchain()
    with pytest.raises(NativePathError, match=re.escape(reason)):
        measure_native(tmp_path)


def test_without_the_cross_tools_or_the_wheels_aarch64_names_what_to_install(monkeypatch,
                                                                           tmp_path):
    host = native_host
    if host.HOST_ARCH != "x86_64":
        pytest.skip(f"aarch64 is this host's own architecture ({host.HOST_ARCH})")
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name.startswith("qemu-aarch64")
                        else real_which(name))
    assert host.missing_toolchain("aarch64") == (
        "the aarch64 build needs a cross compiler and qemu: `apt-get install "
        "g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static`")
    monkeypatch.setattr(shutil, "which", real_which)
    if real_which("aarch64-linux-gnu-g++") is None or host.qemu() is None:
        pytest.skip(host.missing_toolchain("aarch64"))
    monkeypatch.setenv(host.CROSS_CACHE_ENV, str(tmp_path))  # an empty cache: nothing fetched
    assert host.missing_toolchain("aarch64") == (
        f"no aarch64 executorch SDK and JRE under {tmp_path / 'aarch64'}: run "
        f"`{host.FETCH_COMMAND}`")


def test_ci_installs_what_the_aarch64_build_names():
    ci = " ".join((REPO / ".ci/run").read_text().split())
    assert f"apt-get install -y -qq {native_host.AARCH64_PACKAGES}" in ci.replace("\\ ", "")
    assert native_host.FETCH_COMMAND in ci


def test_a_qemu_cpu_model_that_computes_int8_wrong_cannot_be_chosen(monkeypatch):
    host = native_host
    # qemu 7.2's `max` advertises SME, and ExecuTorch's int8 kernels then compute wrong logits
    # (MiniLM SST-5 off by 0.89, argmax changed); QEMU 10's `max` and every named core are right.
    with pytest.raises(host.NativeBuildError) as refused:
        host.check_qemu_cpu("max", (7, 2))
    assert str(refused.value) == (
        "PALKIT_QEMU_CPU=max: qemu 7.2 emulates SME on `max` and computes wrong int8 results; "
        "use cortex-a76 (the default), neoverse-n1 or max,sme=off")
    for model, qemu_at in [("max,sme=off", (7, 2)), ("neoverse-n1", (7, 2)), ("max", (10, 0))]:
        assert host.check_qemu_cpu(model, qemu_at) == model
    reason = host.missing_toolchain("aarch64")
    if reason:
        pytest.skip(reason)
    # The launcher always names the model: qemu's own default (QEMU_CPU, else `max`) never runs.
    monkeypatch.setenv("QEMU_CPU", "max")
    monkeypatch.delenv(host.QEMU_CPU_ENV, raising=False)
    assert host.launcher("aarch64")[1:5] == ("-L", "/usr/aarch64-linux-gnu", "-cpu", "cortex-a76")
    monkeypatch.setenv(host.QEMU_CPU_ENV, "max")
    if host.qemu_version(host.qemu()) < (8, 0):
        with pytest.raises(host.NativeBuildError, match="computes wrong int8 results"):
            host.build("aarch64")


# ---- signature first: a bundle the trusted key does not vouch for never reaches native code ----

@pytest.fixture(scope="module")
def signing_keys(tmp_path_factory) -> dict[str, Path]:
    keys = tmp_path_factory.mktemp("keys")
    (signer_key, signer_pub), (other_key, _) = (generate_keypair(keys, "signer"),
                                                generate_keypair(keys, "other"))
    return {"signer": signer_key, "trusted": signer_pub, "other": other_key}


def _signed_copy(et_bundle: Path, folder: Path, key: Path | None) -> Path:
    shutil.copytree(et_bundle, folder)
    if key is not None:
        sign_bundle(folder, key)
    return folder


def _flip_one_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_signed_payload(sig: Path) -> None:
    doc = json.loads(sig.read_bytes())
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"sst.safetensors",
                                                                      b"sst.safetensorz")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    sig.write_text(json.dumps(doc))


def test_signed_bundle_runs_through_the_jni_path_with_the_trusted_key(native_build, et_bundle,
                                                                      signing_keys, tmp_path):
    bundle = _signed_copy(et_bundle, tmp_path / "signed", signing_keys["signer"])
    done = harness(native_build, "run", bundle, 1, TEXT, PAIR, "sst",
                   trust_key=signing_keys["trusted"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["task"] for r in json.loads(done.stdout)] == ["sst"]
    # The probe that the refusals below rely on does see the library when it is loaded.
    assert "native runtime loaded: yes" in done.stderr


@pytest.mark.parametrize("case, expected", [
    ("unsigned", "{bundle}/model.sig: missing: the bundle is not signed"),
    ("wrong_key", "{bundle}/model.sig: signed by another key than the trusted one"),
    ("tampered_signature", "{bundle}/model.sig: the signature does not verify with the trusted"),
    ("tampered_manifest", "{bundle}/manifest.json: not the signed manifest"),
    # The signed manifest is authentic and pins the file's SHA-256: the core's hash check.
    ("tampered_file", "refused: executorch/sst.safetensors is corrupt: SHA-256"),
])
def test_untrusted_bundle_is_refused_before_the_native_library_loads(
        host_build, et_bundle, signing_keys, tmp_path, case, expected):
    # The Java core refuses before any native code loads, so nothing here depends on the
    # architecture: host only (aarch64's signed run and raw probe cover its trust path).
    key = {"unsigned": None, "wrong_key": signing_keys["other"]}.get(case, signing_keys["signer"])
    bundle = _signed_copy(et_bundle, tmp_path / case, key)
    if case == "tampered_signature":
        _edit_signed_payload(bundle / SIGNATURE_FILE)
    elif case == "tampered_manifest":
        manifest = bundle / "manifest.json"
        manifest.write_bytes(manifest.read_bytes().replace(b'"sst"', b'"sst2"', 1))
    elif case == "tampered_file":  # same size: the SHA-256 catches it
        _flip_one_byte(bundle / "executorch/sst.safetensors", 200)
    done = harness(host_build, "run", bundle, 1, TEXT, PAIR, "sst",
                   trust_key=signing_keys["trusted"])
    message = refusal(done)
    assert message.startswith("refused: ") and expected.format(bundle=bundle) in message, message
    assert "native runtime loaded: no" in done.stderr.splitlines()[-2]


def test_unsigned_bundle_loads_without_a_trusted_key_and_raw_probes_need_none(
        native_build, et_bundle, signing_keys):
    done = harness(native_build, "run", et_bundle, 1, TEXT, PAIR, "sst")
    assert done.returncode == 0, done.stderr[-3000:]
    raw = probe(native_build, et_bundle / "executorch/trunk.pte",
                et_bundle / "executorch/trunk.ptd", et_bundle / "executorch/sst.safetensors",
                et_bundle, trust_key=signing_keys["trusted"])
    assert "program loads files no signed manifest vouches for" in refusal(raw)
    assert "native runtime loaded: no" in raw.stderr


@pytest.mark.slow
def test_jni_runs_each_task_of_a_hybrid_bundle_through_its_own_method(native_build,
                                                                    hybrid_bundle):
    # the launch tasks' PALs (forward), heads only (forward_head), PALs on top (forward_pal_1)
    order = ["sst", "cfimdb", "para", "dup", "sst"]
    done = harness(native_build, "run", hybrid_bundle, 1, TEXT, PAIR, *order)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    engine = Engine(load_bundle(hybrid_bundle), "executorch")
    assert {engine.bundle.manifest.executorch_method(t)[0] for t in order} == {
        "forward", "forward_head", "forward_pal_1"}
    for row in rows:
        task = engine.bundle.tasks[row["task"]]
        ids, mask, types = engine.tokenizer(TEXT, PAIR if task.is_pair else None)
        expected, _, _ = engine.run_ids(task.name, ids, mask, types)
        assert_logits_match(native_build, row["logits"], expected)
