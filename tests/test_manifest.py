"""The typed manifest: round trip to the same bytes, strict reading, cross-reference checks.

Fast: a hand-made manifest, no export. The exported manifests are checked in
tests/test_export_bundle.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from palkit.runtime.manifest import (FORMAT, IO, VERSION, AllTasksMethod, BundleError,
                                     ExecuTorchSection, FileEntry, Manifest, OnnxRuntimeSection,
                                     TaskEntry, TokenizerSettings, Trunk, read_manifest,
                                     write_manifest)

SHA = "ab" * 32


def task(name: str, kind: str = "single_classification") -> TaskEntry:
    return TaskEntry(name=name, kind=kind, labels=["no", "yes"], score_range=None,
                     metric="accuracy", num_outputs=2, trunk_sha256=SHA,
                     files={"executorch": f"executorch/{name}.safetensors",
                            "onnxruntime": f"onnx/{name}.onnx_adapter"},
                     spec={"name": name}, decoding="argmax", threshold=None)


def manifest(all_tasks: bool = True) -> Manifest:
    tasks = [task("a"), task("b", "pair_classification")]
    et = ExecuTorchSection(version="1.5.1", torch="2.13.0", backend="xnnpack",
                           program="executorch/trunk.pte", trunk_data="executorch/trunk.ptd",
                           method="forward", task_inputs=["head.out.weight_t"],
                           output_columns=16,
                           seq_len={"min": 2, "max": 32, "dynamic": True}, non_delegated_ops=None,
                           all_tasks=AllTasksMethod("executorch/all_tasks.pte", "forward_all",
                                                    ["a", "b"]) if all_tasks else None)
    ort = OnnxRuntimeSection(version="1.31.1", opset=17, trunk_model="onnx/trunk.onnx",
                             output_columns=16, adapter_inputs=["head.out.weight"], fusions={})
    m = Manifest(palkit_version="0.1.0",
                 trunk=Trunk(SHA, "base", 32, 2, None),
                 tokenizer=TokenizerSettings("vocab.txt", True, True, 32, "[CLS]", "[SEP]",
                                             "[PAD]", "[UNK]", "[MASK]", 100),
                 quantization={"scheme": "fp32", "details": "none"},
                 runtimes={"executorch": et, "onnxruntime": ort}, tasks=tasks, files={}, io=IO)
    rels = m.files_for()
    return Manifest(**{**m.__dict__, "files": {r: FileEntry("0" * 64, 1) for r in rels}})


def test_round_trip_gives_the_same_bytes(tmp_path: Path):
    write_manifest(tmp_path, manifest())
    first = (tmp_path / "manifest.json").read_bytes()
    again = read_manifest(tmp_path)
    assert again == manifest()
    write_manifest(tmp_path, again)
    assert (tmp_path / "manifest.json").read_bytes() == first
    raw = json.loads(first)
    assert (raw["format"], raw["version"]) == (FORMAT, VERSION)
    assert raw["runtimes"]["executorch"]["all_tasks"]["tasks"] == ["a", "b"]


def test_no_all_tasks_key_when_there_is_no_all_tasks_method(tmp_path: Path):
    write_manifest(tmp_path, manifest(all_tasks=False))
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert "all_tasks" not in raw["runtimes"]["executorch"]
    assert read_manifest(tmp_path).all_tasks("executorch") is None


def test_files_for_lists_only_what_a_reader_loads():
    m = manifest()
    assert set(m.files_for(["onnxruntime"], ["a"])) == {"vocab.txt", "onnx/trunk.onnx",
                                                        "onnx/a.onnx_adapter"}
    # ExecuTorch: the programs and their trunk data, then each task's weights file
    assert set(m.files_for(["executorch"], ["b"])) == {"vocab.txt", "executorch/trunk.pte",
                                                       "executorch/trunk.ptd",
                                                       "executorch/all_tasks.pte",
                                                       "executorch/b.safetensors"}


HEAD_GRAPH = {"model": "onnx/head.onnx", "adapter": {"kind": "head", "layers": []}, "pal": None,
              "adapter_inputs": ["head.out.bias"]}


def edited(tmp_path: Path, fn) -> Path:
    write_manifest(tmp_path, manifest())
    raw = json.loads((tmp_path / "manifest.json").read_text())
    fn(raw)
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    return tmp_path


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format="other"), "not a palkit bundle manifest"),
    (lambda m: m.update(version=VERSION + 1), f"bundle format version {VERSION + 1} is not supported"),
    # a bundle of format 1 (a program per ExecuTorch task): named, and what to do
    (lambda m: m.update(version=1), r"format version 1 is not supported .*re-export it"),
    (lambda m: m["tokenizer"].pop("max_length"), r"'tokenizer' lacks \['max_length'\]"),
    (lambda m: m["trunk"].update(extra=1), r"'trunk' has unknown keys \['extra'\]"),
    (lambda m: m["tasks"][0].update(kind="ranking"), "unknown kind 'ranking'"),
    (lambda m: m["tasks"][1].update(trunk_sha256="0" * 64), "built against trunk"),
    (lambda m: m["tasks"][0]["files"].pop("onnxruntime"), "task 'a' has no onnxruntime file"),
    (lambda m: m["files"].pop("onnx/b.onnx_adapter"), "not listed under 'files'"),
    (lambda m: m["runtimes"]["executorch"]["all_tasks"].update(tasks=["a", "zz"]),
     r"names tasks \['zz'\]"),
    # an all-tasks method that names no program file of its own
    (lambda m: m["runtimes"]["executorch"]["all_tasks"].pop("program"),
     r"'runtimes.executorch.all_tasks' lacks \['program'\]; re-export"),
    (lambda m: m["files"].pop("executorch/all_tasks.pte"), "not listed under 'files'"),
    (lambda m: m.update(runtimes={}), "names no runtime"),
    # a per-placement ONNX graph: its shape, its pal, its adapter, one graph per adapter
    (lambda m: m["runtimes"]["onnxruntime"].update(graphs={"head": {"model": "onnx/head.onnx"}}),
     r"graphs.head is not \{model, adapter, pal, adapter_inputs\}"),
    (lambda m: m["runtimes"]["onnxruntime"].update(graphs={"head": HEAD_GRAPH, "pal_0": {
        **HEAD_GRAPH, "model": "onnx/pal_0.onnx"}}), "two graphs of one adapter"),
    (lambda m: m["runtimes"]["onnxruntime"].update(graphs={"head": {
        **HEAD_GRAPH, "adapter": {"kind": "pal", "layers": [0]}}}), "is not its pal's adapter"),
    (lambda m: m["runtimes"]["onnxruntime"].update(graphs={"head": {
        **HEAD_GRAPH, "pal": {"layers": [0]}}}), r"graphs.head.pal .* is not null or a PAL"),
    (lambda m: m["runtimes"]["onnxruntime"].update(graphs={"head": HEAD_GRAPH}),
     "'onnx/head.onnx', which is not listed under 'files'"),
])
def test_refusals_are_one_line(tmp_path: Path, edit, message):
    with pytest.raises(BundleError, match=message) as e:
        read_manifest(edited(tmp_path, edit))
    assert "\n" not in str(e.value) and "manifest.json" in str(e.value)


def test_missing_and_broken_manifest(tmp_path: Path):
    with pytest.raises(BundleError, match="not found"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_manifest(tmp_path)
