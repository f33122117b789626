"""The Android app's build files and its plain-Java parts, checked without an Android SDK.

What runs here: the app's runtime-version comparison (RuntimeVersions.java, whose lines the app
shows above its tabs) compiled with javac and run; the version catalog against palkit's own
pins; and the app's CMakeLists.txt configured with this machine's CMake far enough to reach its
own checks (no tag and no source, a Python without torch). With PALKIT_EXECUTORCH_SOURCE naming
an ExecuTorch checkout (a folder named `executorch`, submodules in place) it also configures
against that checkout: ExecuTorch's folder-name check and its Python steps (torch headers, kernel
code generation) pass, and the same checkout under another folder name is refused by ExecuTorch
as before the fix. The Gradle build, the Kotlin and the phone build of ExecuTorch need an
Android SDK and are not run here (android_demo/README.md).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testing_utils import ANDROID_DEMO, HANG_GUARD_S, REPO, jdk_tool, tool

APP = ANDROID_DEMO / "app"
CMAKE_SOURCE = APP / "src/main/cpp"
EXECUTORCH_SOURCE_ENV = "PALKIT_EXECUTORCH_SOURCE"


def test_runtime_version_differences_are_worded_for_the_screen(core_classes, tmp_path):
    javac, java = jdk_tool("javac"), jdk_tool("java")
    sources = [str(APP / "src/main/java/io/palkit/demo/runtime/RuntimeVersions.java"),
               str(APP / "src/test/java/io/palkit/demo/runtime/RuntimeVersionsTest.java")]
    compiled = subprocess.run([javac, "-encoding", "UTF-8", "-cp", str(core_classes), "-d",
                               str(tmp_path), *sources],
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert compiled.returncode == 0, compiled.stderr
    run = subprocess.run([java, "-cp", os.pathsep.join([str(tmp_path), str(core_classes)]),
                          "io.palkit.demo.runtime.RuntimeVersionsTest"],
                         capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert run.returncode == 0 and run.stdout.strip().endswith("all passed"), run.stdout
    assert run.stdout.count("PASS ") == 7


def test_version_catalog_follows_the_exporters_pins():
    """The app builds ExecuTorch at the exporter's exact version; onnxruntime-android at the same
    major.minor (Maven lacks some patch releases: libs.versions.toml says which and why)."""
    catalog = tomllib.loads((ANDROID_DEMO / "gradle/libs.versions.toml").read_text())["versions"]
    pins = dict(re.findall(r'"(executorch|onnxruntime)==([^"]+)"',
                           (REPO / "pyproject.toml").read_text()))
    assert catalog["executorch"] == pins["executorch"]
    assert catalog["onnxruntime"].split(".")[:2] == pins["onnxruntime"].split(".")[:2]


def configure(build: Path, *args: str) -> subprocess.CompletedProcess:
    cmake = tool("cmake", "the app's CMake build (android_demo/README.md)")
    return subprocess.run([cmake, "-S", str(CMAKE_SOURCE), "-B", str(build), *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_cmake_asks_for_a_tag_or_a_source_folder(tmp_path):
    done = configure(tmp_path / "build")
    assert done.returncode != 0
    assert "Give -DEXECUTORCH_GIT_TAG=v<version>" in " ".join(done.stderr.split())


def test_cmake_names_the_python_setting_when_torch_is_missing(tmp_path):
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\n"
                        "exit 1\n")
    no_torch.chmod(0o755)
    done = configure(tmp_path / "build", "-DEXECUTORCH_GIT_TAG=v1.5.1",
                     f"-DPYTHON_EXECUTABLE={no_torch}")
    message = " ".join(done.stderr.split())
    assert done.returncode != 0
    assert f"{no_torch} cannot import torch, torchgen and yaml" in message
    assert "-Ppalkit.python=/path/to/python or PALKIT_PYTHON" in message
    assert "No module named 'torch'" in message
    assert not (tmp_path / "build/executorch-checkout/executorch").exists()  # nothing cloned


@pytest.fixture(scope="module")
def executorch_source() -> Path:
    source = os.environ.get(EXECUTORCH_SOURCE_ENV)
    if not source:
        pytest.skip(f"{EXECUTORCH_SOURCE_ENV} names no ExecuTorch checkout (android_demo/README.md "
                    "says how the recorded run got one without network)")
    return Path(source)


def test_cmake_configures_against_an_executorch_checkout(executorch_source, tmp_path):
    done = configure(tmp_path / "build", f"-DFETCHCONTENT_SOURCE_DIR_EXECUTORCH={executorch_source}",
                     f"-DPYTHON_EXECUTABLE={sys.executable}")
    log = done.stdout + done.stderr
    assert f"palkit: ExecuTorch's build uses {sys.executable} (torch " in log
    assert "must be cloned into a directory named exactly" not in log
    # ExecuTorch's configure found torch's headers with that interpreter, and set up its kernel
    # code generation (which imports yaml and torchgen at build time) to run with it.
    assert f"'{sys.executable}' '-c' 'import importlib.util; print(importlib.util.find_spec" in log
    assert f"Command - {sys.executable};-m;codegen.tools.gen_oplist" in log
    assert "-- Configuring done" in log  # to its end (generating may still miss a submodule)
    assert re.search(r"EXECUTORCH_PAL_DEFAULT\s+: android\n", log)  # its logs go to logcat
    assert re.search(r"EXECUTORCH_BUILD_XNNPACK\s+: ON\n", log)


def test_a_checkout_in_another_folder_name_is_refused_by_executorch(executorch_source, tmp_path):
    renamed = tmp_path / "executorch-src"  # FetchContent's default folder name, before the fix
    renamed.symlink_to(executorch_source)
    done = configure(tmp_path / "build", f"-DFETCHCONTENT_SOURCE_DIR_EXECUTORCH={renamed}",
                     f"-DPYTHON_EXECUTABLE={sys.executable}")
    assert done.returncode != 0
    assert ("must be cloned into a directory named exactly `executorch`; found `executorch-src`"
            in " ".join(done.stderr.split()))
