"""Shared fixtures, one per heavy artefact, each built once per session: a tiny random BERT with
a real WordPiece tokenizer, tiny task data, a tiny PAL run and its bundles, the app's Java core
compiled, the app's native path built per architecture. Read-only: a test that changes one
copies it. Plain helpers are in testing_utils.py.

Nothing here touches the network or a data folder outside the test's own.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from palkit.android_demo.host import native_host
from testing_utils import (ANDROID_DEMO, HANG_GUARD_S, jdk_tool, make_tiny_bert, make_tiny_data,
                           native_toolchain, tiny_config)

# Tiny models run fastest on one thread, and the tests then leave a core to whatever else runs.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("tiny-data"))


@pytest.fixture(scope="session")
def tiny_pal_run(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path, tiny_data: Path) -> Path:
    """A finished PAL run on sst/quora/sts, shared by tests that only read it."""
    from palkit.trainer.train import train
    out = tmp_path_factory.mktemp("runs") / "pals"
    return train(tiny_config(tiny_bert, tiny_data, out))


@pytest.fixture(scope="session")
def et_fp32(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 bundle for both runtimes with sst (one text) and sts (a pair): two task programs
    over one trunk.ptd plus the all-tasks program. Read-only: tests that change it copy it."""
    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    out = tmp_path_factory.mktemp("b") / "et-fp32"
    export_run(tiny_pal_run, out,
               ExportOptions(target="android", quant="fp32", tasks=["sst", "sts"],
                             data_dir=tiny_data),
               log=lambda *a: None)
    return out


@pytest.fixture(scope="session")
def hybrid_run(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PAL run (PALs in every layer) with tasks added later: cfimdb and dup (a described pair
    task) as heads only, para (the same pair task) with PALs in the top layer."""
    from palkit import cli
    run = tmp_path_factory.mktemp("hybrid") / "run"
    shutil.copytree(tiny_pal_run, run, symlinks=True)
    short = ["--data-dir", str(tiny_data), "--epochs", "1", "--steps-per-epoch", "2",
             "--batch-size", "8"]
    pair = ["--kind", "pair_classification", "--text-columns", "sentence1,sentence2",
            "--label-column", "is_duplicate", "--labels", "no,yes",
            "--train-file", "quora/quora-train.csv", "--dev-file", "quora/quora-dev.csv"]
    for args in (["--task", "cfimdb", "--adapter", "head"],
                 ["--task", "dup", "--adapter", "head", *pair],
                 ["--task", "para", "--adapter", "pal", "--pal-layers", "top-1", *pair]):
        assert cli.main(["add-task", str(run), *args, *short]) == 0
    return run


@pytest.fixture(scope="session")
def hybrid_bundle(hybrid_run: Path, tiny_data: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 ExecuTorch bundle of the hybrid run: sst and quora (the run's PALs), cfimdb and dup
    (heads only), para (PALs on top). Read-only."""
    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    out = tmp_path_factory.mktemp("b") / "hybrid"
    export_run(hybrid_run, out,
               ExportOptions(target="executorch", quant="fp32",
                             tasks=["sst", "quora", "cfimdb", "dup", "para"], data_dir=tiny_data),
               log=lambda *a: None)
    return out


@pytest.fixture(scope="session")
def onnx_fp32(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 ONNX Runtime bundle of every task of the tiny PAL run. Read-only."""
    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    out = tmp_path_factory.mktemp("b") / "onnx-fp32"
    export_run(tiny_pal_run, out, ExportOptions(target="onnx", quant="fp32", data_dir=tiny_data),
               log=lambda *a: None)
    return out


@pytest.fixture(scope="session")
def host_build() -> native_host.HostBuild:
    """The app's JNI and Java built for this host against the executorch wheel's C++ SDK
    (skipped, with the reason, without a C++ compiler or a JDK)."""
    native_toolchain()
    return native_host.build()


@pytest.fixture(scope="session", params=native_host.ARCHES)
def native_build(request) -> native_host.HostBuild:
    """The app's JNI and Java built for one architecture: this host's, and aarch64 run under
    qemu (skipped, with the reason, where that build's tools are missing)."""
    native_toolchain(request.param)
    return native_host.build(request.param)


@pytest.fixture(scope="session")
def core_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The app's pure-Java core (android_demo/core: main and test sources, the fuzzer included)
    compiled once (skipped, with the reason, without a JDK)."""
    javac = jdk_tool("javac")
    sources = sorted(str(p) for p in (ANDROID_DEMO / "core").glob("src/*/java/**/*.java"))
    classes = tmp_path_factory.mktemp("core-classes")
    compiled = subprocess.run([javac, "-encoding", "UTF-8", "-d", str(classes), *sources],
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert compiled.returncode == 0, f"javac failed:\n{compiled.stdout}{compiled.stderr}"
    return classes
