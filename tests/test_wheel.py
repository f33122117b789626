"""palkit as its users get it: the wheel, installed into a fresh virtual environment outside the
checkout, runs the whole path on tiny data from a folder that is not the checkout.

The wheel is built from a copy of the tree (a build writes build/ and egg-info into the package
folder) and installed with `--no-deps` into a venv that sees the packages of the interpreter
running this suite, wherever they are installed (system-wide, a venv, the user's site): no
network. Every command runs with the checkout nowhere on sys.path, so a module reaching into the
checkout (a file beside the package, lab/, a PYTHONPATH) fails here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from palkit.android_demo.host import native_host
from testing_utils import HANG_GUARD_S, REPO

pytestmark = pytest.mark.slow


# Not part of the package: outputs, caches and what builds leave behind.
NOT_SOURCE = shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                    "runs", "bundles", "reports", "results", "node_modules")


def site_folders() -> list[str]:
    """Where this interpreter's packages are installed: its sys.path's site folders."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")
            and Path(p).is_dir() and not Path(p).resolve().is_relative_to(REPO)]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source, out = tmp_path_factory.mktemp("source") / "palkit", tmp_path_factory.mktemp("wheel")
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=HANG_GUARD_S)
    (path,) = out.glob("palkit-*.whl")
    return path


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; its bin/ folder. A .pth file puts this
    interpreter's site folders after the venv's own (`--system-site-packages` would give the base
    interpreter's, not an active venv's); their own .pth files do not run, so an editable install
    of the checkout stays out."""
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=HANG_GUARD_S)
    own = subprocess.run([str(folder / "bin/python"), "-c",
                          "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    (Path(own) / "suite-packages.pth").write_text("\n".join(site_folders()) + "\n")
    subprocess.run([str(folder / "bin/python"), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=HANG_GUARD_S)
    return folder / "bin"


def test_the_wheel_installs_one_import_package(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"palkit", "palkit-0.1.0.dist-info"}
    # what the commands read at run time ships as package data; the app's dev tools do not
    for shipped in ("palkit/runtime/BUNDLE.md", "palkit/studies/converged.toml",
                    "palkit/android_demo/app/src/main/cpp/palkit_executorch_jni.cpp",
                    "palkit/android_demo/host/java/io/palkit/host/HostHarness.java",
                    "palkit/android_demo/core/src/main/java/io/palkit/core/bundle/Bundle.java"):
        assert shipped in names
    assert not [n for n in names if n.startswith(("palkit/lab/", "palkit/tests/",
                                                  "palkit/android_demo/tools/"))]


def test_installed_palkit_runs_the_whole_path_outside_the_checkout(
        venv: Path, tiny_bert: Path, tiny_data: Path, tmp_path: Path):
    work = tmp_path / "work"  # the user's project folder: the data in ./data, no checkout
    work.mkdir()
    (work / "data").symlink_to(tiny_data, target_is_directory=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PALKIT_DATA_DIR", "PALKIT_TRUST_KEY")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), OMP_NUM_THREADS="1")

    def palkit(*args: str) -> str:
        done = subprocess.run([str(venv / "palkit"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, f"palkit {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    where = subprocess.run([str(venv / "python"), "-c", "import palkit; print(palkit.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(venv.parent)

    palkit("train", "--base-model", str(tiny_bert), "--tasks", "sst,sts", "--epochs", "1",
           "--steps-per-epoch", "2", "--batch-size", "8", "--max-len", "32", "--pal-size", "8",
           "--pal-heads", "2", "--device", "cpu", "--out", "runs/tiny")  # data from ./data
    palkit("export", "runs/tiny", "--quant", "fp32", "--out", "bundles/tiny")
    predicted = json.loads(palkit("predict", "bundles/tiny", "--all", "--json", "a good film",
                                  "a fine film"))
    assert [p["task"] for p in predicted["predictions"]] == ["sts"]  # a pair reads two texts

    native = native_host.missing_toolchain() is None  # the app's native path needs a JDK and c++
    palkit("bench", "bundles/tiny", "--run", "runs/tiny", "--threads", "1", "--seq-lens", "16",
           "--warmup", "0", "--min-runs", "2", "--min-seconds", "0", "--max-seconds", "0.2",
           "--rounds", "1", "--peers", "none", "--no-ceiling", "--splits", "dev",
           "--native" if native else "--no-native", "--out", "bench.json")
    bench = json.loads((work / "bench.json").read_text())
    assert any(s["role"] == "native" for s in bench["subjects"].values()) == native
    palkit("report", "--bench", "bench.json", "--out", "report")
    assert (work / "report" / "report.md").is_file()

    runtimes = ["executorch", "onnxruntime"] if native else ["onnxruntime"]
    palkit("verify-arch", "bundles/tiny", "--run", "runs/tiny", "--arch", native_host.HOST_ARCH,
           "--max-examples", "8", "--runtimes", ",".join(runtimes), "--no-write",
           "--out", "arch.json")
    record = json.loads((work / "arch.json").read_text())
    assert sorted(record["runtimes"]) == runtimes and record["passed"]
