"""manifest.json, the bundle's contract (runtime/BUNDLE.md), as typed dataclasses.

This module is the only code that reads or writes manifest.json, and the one place that checks
its format name and version:

    manifest = read_manifest(folder)          # a Manifest, or a one-line BundleError
    manifest.task("sst").files["executorch"]  # "executorch/sst.safetensors"
    manifest.files_for(["onnxruntime"], ["sst"])  # {relative path: what needs it}
    write_manifest(folder, manifest)          # atomic, keys sorted: same manifest, same bytes

Reading is strict: a missing or unknown key is refused (re-export the bundle), so a Manifest in
memory always round-trips to the same file.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

from palkit.core.errors import PalkitError
from palkit.core.fileio import write_json
from palkit.runtime.kinds import KINDS

FORMAT = "palkit-bundle"
# 2: ExecuTorch tasks are weights files bound to one trunk program (1: a program per task)
# 3: multi_label and token_tagging tasks; outputs are [1 + seq, output_columns] rows (row 0 the
#    pooled sentence, row 1 + p token p); tasks record threshold and decoding
VERSION = 3
MANIFEST_FILE = "manifest.json"
VERIFY_FILE = "verify.json"       # what export measured (export/verify.py); not in the manifest
RUNTIMES = ("executorch", "onnxruntime")
# OnnxRuntimeSection.pal of a bundle written before that field: its graph has trunk.pal
TRUNK_PAL = "trunk.pal"
# The text inputs and the output every program and graph has: a task's rows, [1 + seq,
# output_columns] (row 0 the sentence, row 1 + p token p; a task reads its first num_outputs
# columns); ExecuTorch's task weights follow as further inputs (task_inputs).
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
IO = {"inputs": [{"name": n, "dtype": "int64", "shape": [1, "seq"]} for n in TEXT_INPUTS],
      "outputs": [{"name": "logits", "dtype": "float32",
                   "shape": [1, "1+seq", "output_columns"]}]}


class BundleError(PalkitError, ValueError):
    """A bundle is missing, corrupt, foreign or cannot run this input."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class TaskEntry:
    name: str
    kind: str
    labels: list[str] | None
    score_range: list[float] | None
    metric: str
    num_outputs: int
    trunk_sha256: str
    files: dict[str, str]           # runtime -> relative path of the task's file
    spec: dict[str, Any]            # the training TaskSpec (TaskSpec.from_dict reads it)
    decoding: str                   # the kind's decoding rule (TaskKind.decoding)
    threshold: float | None         # multi_label: a label is chosen when its sigmoid reaches it
    # {"kind": "head"|"pal", "layers": [...]} (adapter_record); absent: the trunk's placement
    adapter: dict[str, Any] | None = None

    @property
    def is_pair(self) -> bool:
        return KINDS[self.kind].texts == 2

    @property
    def is_regression(self) -> bool:
        return KINDS[self.kind].regression

    @property
    def is_multi_label(self) -> bool:
        return KINDS[self.kind].multi_label

    @property
    def is_tagging(self) -> bool:
        return KINDS[self.kind].per_token

    def rows(self, out: Any) -> Any:
        """The task's part of its output rows [1 + seq, columns]: [num_outputs] from the
        sentence row, or (tagging) [seq, num_outputs], one row per token."""
        return out[1:, :self.num_outputs] if self.is_tagging else out[0, :self.num_outputs]


@dataclass(frozen=True)
class AllTasksMethod:
    program: str         # its own program over trunk_data (its memory plan grows with the tasks)
    method: str          # the method running `tasks`, stacked in this order
    tasks: list[str]

    @property
    def file(self) -> str:
        return self.program


@dataclass(frozen=True)
class AllTasksGraph:
    model: str           # the graph running `tasks` on one input, over the same trunk_data
    tasks: list[str]

    @property
    def file(self) -> str:
        return self.model


@dataclass(frozen=True)
class ExecuTorchSection:
    version: str
    torch: str
    backend: str
    program: str                       # the one-task methods; task weights are method inputs
    trunk_data: str                    # the trunk's constants (trunk.ptd)
    method: str                        # one task: text inputs, then task_inputs
    task_inputs: list[str]             # tensor names in each task's weights file, input order
    output_columns: int
    seq_len: dict[str, Any]
    non_delegated_ops: list[str] | None
    all_tasks: AllTasksMethod | None = None    # written only when present
    # one-task methods of the other placements (tasks added later with their own adapter):
    # name -> {"adapter": adapter_record, "task_inputs": [...]}; written only when present
    methods: dict[str, dict[str, Any]] | None = None

    trunk_key = "trunk_data"

    @property
    def runtime_files(self) -> list[str]:
        all_tasks = [self.all_tasks.file] if self.all_tasks is not None else []
        return [self.program, self.trunk_data, *all_tasks]


@dataclass(frozen=True)
class OnnxRuntimeSection:
    version: str
    opset: int
    trunk_model: str
    output_columns: int
    adapter_inputs: list[str] | None
    fusions: dict[str, int] | None
    # the graph's PAL placement (a PalConfig dict; None: heads only), the union of the tasks'
    # when they differ; TRUNK_PAL (not written) in bundles from before this field
    pal: dict[str, Any] | None | str = TRUNK_PAL
    # the weights every graph of the section reads (external data, each tensor once); None in
    # bundles whose trunk_model holds its own
    trunk_data: str | None = None
    all_tasks: AllTasksGraph | None = None  # written only when present
    # one-task graphs of the tasks' own placements where they differ from `pal` (a task runs
    # only its own adapter): name -> {"model", "adapter", "pal", "adapter_inputs"}; written only
    # when present
    graphs: dict[str, dict[str, Any]] | None = None

    trunk_key = "trunk_model"

    @property
    def runtime_files(self) -> list[str]:
        data = [self.trunk_data] if self.trunk_data is not None else []
        all_tasks = [self.all_tasks.file] if self.all_tasks is not None else []
        own = [g["model"] for g in (self.graphs or {}).values()]
        return [self.trunk_model, *data, *own, *all_tasks]


@dataclass(frozen=True)
class OnnxGraph:
    """A one-task ONNX graph: its file, PAL placement (a PalConfig dict; None: heads only) and
    the overridable inputs an .onnx_adapter for it sets (None: not recorded)."""
    model: str
    pal: dict[str, Any] | None
    adapter_inputs: list[str] | None


@dataclass(frozen=True)
class Trunk:
    sha256: str
    base_model: str | None
    hidden_size: int
    num_layers: int
    pal: dict[str, Any] | None


@dataclass(frozen=True)
class TokenizerSettings:
    vocab_file: str
    lowercase: bool
    strip_accents: bool
    max_length: int
    cls_token: str
    sep_token: str
    pad_token: str
    unk_token: str
    mask_token: str
    max_input_chars_per_word: int


@dataclass(frozen=True)
class Manifest:
    palkit_version: str
    trunk: Trunk
    tokenizer: TokenizerSettings
    quantization: dict[str, Any]     # {"scheme": "int8"|"fp32", "details": free text per runtime}
    runtimes: dict[str, ExecuTorchSection | OnnxRuntimeSection]
    tasks: list[TaskEntry]
    files: dict[str, FileEntry]      # every file of the bundle: size and SHA-256
    io: dict[str, Any]               # IO: the inputs and output of every program

    @property
    def runtime_names(self) -> list[str]:
        """The runtimes this bundle has, in RUNTIMES order (executorch first)."""
        return [r for r in RUNTIMES if r in self.runtimes]

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    @property
    def int8(self) -> bool:
        return self.quantization["scheme"] == "int8"

    def task(self, name: str) -> TaskEntry:
        for t in self.tasks:
            if t.name == name:
                return t
        raise BundleError(f"no task '{name}' (it has: {', '.join(self.task_names)})")

    def task_bytes(self, name: str) -> dict[str, int]:
        """Bytes of one task's own files, per runtime (its adapter or weights file)."""
        return {rt: self.files[path].bytes for rt, path in self.task(name).files.items()}

    def adapter(self, name: str) -> dict[str, Any]:
        """The task's adapter record: its own, or (older bundles) the trunk's placement."""
        return self.task(name).adapter or adapter_record(self.trunk.pal)

    def executorch_method(self, name: str) -> tuple[str, list[str]]:
        """The ExecuTorch one-task method that runs task `name`, and its task inputs in order:
        `method` for the trunk's placement, else the one of `methods` with the task's adapter."""
        section = self.runtimes["executorch"]
        assert isinstance(section, ExecuTorchSection)
        adapter = self.adapter(name)
        if adapter == adapter_record(self.trunk.pal):
            return section.method, section.task_inputs
        for method, spec in (section.methods or {}).items():
            if spec.get("adapter") == adapter:
                return method, spec["task_inputs"]
        raise BundleError(f"task '{name}' has adapter {adapter_text(adapter)}, for which the "
                          "bundle's ExecuTorch program has no method; re-export the bundle with "
                          "all its tasks")

    def onnx_graph_pal(self) -> dict[str, Any] | None:
        """The PAL placement trunk.onnx was exported with (a PalConfig dict; None: heads only)."""
        section = self.runtimes["onnxruntime"]
        assert isinstance(section, OnnxRuntimeSection)
        return self.trunk.pal if section.pal == TRUNK_PAL else section.pal  # type: ignore

    def onnx_graph(self, adapter: dict[str, Any]) -> OnnxGraph:
        """The ONNX graph a task of this adapter record runs in (its .onnx_adapter is laid out
        for it): the `graphs` entry of that adapter, else trunk_model."""
        section = self.runtimes["onnxruntime"]
        assert isinstance(section, OnnxRuntimeSection)
        for g in (section.graphs or {}).values():
            if g["adapter"] == adapter:
                return OnnxGraph(g["model"], g["pal"], g["adapter_inputs"])
        return OnnxGraph(section.trunk_model, self.onnx_graph_pal(), section.adapter_inputs)

    def all_tasks(self, runtime: str) -> AllTasksMethod | AllTasksGraph | None:
        return getattr(self.runtimes.get(runtime), "all_tasks", None)

    def trunk_file(self, runtime: str) -> str:
        section = self.runtimes[runtime]
        return getattr(section, section.trunk_key)

    def files_for(self, runtimes: list[str] | None = None,
                  tasks: list[str] | None = None) -> dict[str, str]:
        """Relative paths a reader of these runtimes and tasks loads (None: all), each with what
        needs it."""
        runtimes = self.runtime_names if runtimes is None else runtimes
        wanted = self.task_names if tasks is None else tasks
        needed = {self.tokenizer.vocab_file: "tokenizer"}
        for r in runtimes:
            for rel in self.runtimes[r].runtime_files:
                needed[rel] = f"runtimes.{r}"
            for name in wanted:
                needed[self.task(name).files[r]] = f"task '{name}'"
        return needed

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for section in d["runtimes"].values():
            for key in ("all_tasks", "methods", "trunk_data", "graphs"):
                if key in section and section[key] is None:
                    del section[key]
            if section.get("pal") == TRUNK_PAL:
                del section["pal"]
        for task in d["tasks"]:
            if task["adapter"] is None:
                del task["adapter"]
        return {"format": FORMAT, "version": VERSION, **d}


def adapter_record(pal: dict[str, Any] | None) -> dict[str, Any]:
    """A task's adapter as the manifest records it: a head only, or PALs in these layers."""
    return {"kind": "head", "layers": []} if pal is None else \
        {"kind": "pal", "layers": [int(x) for x in pal["layers"]]}


def adapter_text(adapter: Any) -> str:
    if isinstance(adapter, dict) and adapter.get("kind") == "pal":
        return f"PALs in layers {adapter.get('layers')}"
    return "a head only" if isinstance(adapter, dict) and adapter.get("kind") == "head" \
        else repr(adapter)


# ---- reading ---------------------------------------------------------------------------------

def _keys(cls, data: Any, where: str, key: str) -> dict[str, Any]:
    """`data` as the keyword arguments of dataclass `cls`, refusing missing and unknown keys."""
    _object(data, where, key)
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls)
                if f.default is MISSING and f.default_factory is MISSING}
    missing, unknown = sorted(required - set(data)), sorted(set(data) - names)
    if missing or unknown:
        what = f"lacks {missing}" if missing else f"has unknown keys {unknown}"
        raise BundleError(f"{where}: '{key}' {what}; re-export the bundle with this palkit")
    return data


def _build(cls, data: Any, where: str, key: str):
    return cls(**_keys(cls, data, where, key))


def manifest_from_dict(m: Any, where: str) -> Manifest:
    """Check format and version, then build the typed manifest and check its cross-references."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        found = m.get("format") if isinstance(m, dict) else None
        raise BundleError(f"{where}: not a palkit bundle manifest (format {found!r})")
    if m.get("version") != VERSION:
        raise BundleError(f"{where}: bundle format version {m.get('version')!r} is not "
                          f"supported (this palkit reads version {VERSION}; CHANGELOG.md says "
                          "what changed); re-export it: `palkit export RUN --out BUNDLE "
                          "--overwrite`")
    body = _keys(Manifest, {k: v for k, v in m.items() if k not in ("format", "version")},
                 where, "manifest")
    built = Manifest(
        palkit_version=body["palkit_version"],
        trunk=_build(Trunk, body["trunk"], where, "trunk"),
        tokenizer=_build(TokenizerSettings, body["tokenizer"], where, "tokenizer"),
        quantization=_object(body["quantization"], where, "quantization"),
        runtimes=_build_runtimes(body["runtimes"], where),
        tasks=[_build(TaskEntry, t, where, "tasks[]")
               for t in _object(body["tasks"], where, "tasks", list)],
        files={rel: _build(FileEntry, e, where, f"files.{rel}")
               for rel, e in _object(body["files"], where, "files").items()},
        io=_object(body["io"], where, "io"))
    from palkit.runtime.manifest_rules import check_manifest  # the rules read these classes
    check_manifest(built, where)
    return built


def _object(value: Any, where: str, key: str, kind: type = dict) -> Any:
    if not isinstance(value, kind):
        what = "an object" if kind is dict else "a list"
        raise BundleError(f"{where}: '{key}' is not {what}; re-export the bundle")
    return value


def _build_runtimes(raw: Any, where: str) -> dict[str, ExecuTorchSection | OnnxRuntimeSection]:
    raw = _object(raw, where, "runtimes")
    unknown = sorted(set(raw) - set(RUNTIMES))
    if unknown:
        raise BundleError(f"{where}: unknown runtimes {unknown}; re-export the bundle")
    if not raw:
        raise BundleError(f"{where}: names no runtime; re-export the bundle")
    out: dict[str, ExecuTorchSection | OnnxRuntimeSection] = {}
    if "executorch" in raw:
        et = dict(_object(raw["executorch"], where, "runtimes.executorch"))
        if et.get("all_tasks") is not None:
            et["all_tasks"] = _build(AllTasksMethod, et["all_tasks"], where,
                                     "runtimes.executorch.all_tasks")
        out["executorch"] = _build(ExecuTorchSection, et, where, "runtimes.executorch")
    if "onnxruntime" in raw:
        ort = dict(_object(raw["onnxruntime"], where, "runtimes.onnxruntime"))
        if ort.get("all_tasks") is not None:
            ort["all_tasks"] = _build(AllTasksGraph, ort["all_tasks"], where,
                                      "runtimes.onnxruntime.all_tasks")
        for name, g in (_object(ort.get("graphs") or {}, where,
                                "runtimes.onnxruntime.graphs")).items():
            # the shape runtime_files and onnx_graph read; manifest_rules checks the values
            if not isinstance(g, dict) or set(g) != {"model", "adapter", "pal", "adapter_inputs"} \
                    or not isinstance(g["adapter_inputs"], list):
                raise BundleError(f"{where}: runtimes.onnxruntime.graphs.{name} is not "
                                  "{model, adapter, pal, adapter_inputs}; re-export the bundle")
        if isinstance(ort.get("pal"), str):  # only an absent pal means trunk.pal
            raise BundleError(f"{where}: runtimes.onnxruntime.pal is a string; re-export the "
                              "bundle")
        out["onnxruntime"] = _build(OnnxRuntimeSection, ort, where, "runtimes.onnxruntime")
    return out


def read_manifest(folder: str | Path) -> Manifest:
    """The typed manifest of a bundle folder; every refusal is one BundleError line."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        raise BundleError(f"{path}: not found; is {folder} a bundle written by `palkit export`?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: not valid JSON ({e}); re-export the bundle") from None
    return manifest_from_dict(data, str(path))


def write_manifest(folder: str | Path, manifest: Manifest) -> None:
    """Write folder/manifest.json atomically (sorted keys, no timestamps: reproducible bytes)."""
    write_json(Path(folder) / MANIFEST_FILE, manifest.to_dict())


def check_relative(rel: Any, where: str, owner: str) -> None:
    """A manifest path is relative, '/'-separated and has no '..'."""
    if not isinstance(rel, str) or not rel or "\\" in rel:
        raise BundleError(f"{where}: {owner} path {rel!r} is not a relative '/' path; "
                          "re-export the bundle")
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise BundleError(f"{where}: {owner} path '{rel}' escapes the bundle folder; refusing "
                          "it (re-export the bundle)")


def safe_path(folder: Path, rel: Any, owner: str) -> Path:
    """The full path of a manifest path, which must stay inside the folder (symlinks too)."""
    where = str(folder / MANIFEST_FILE)
    check_relative(rel, where, owner)
    full = (folder / Path(*PurePosixPath(rel).parts)).resolve()
    if folder.resolve() not in full.parents:
        raise BundleError(f"{where}: {owner} path '{rel}' escapes the bundle folder; refusing "
                          "it (re-export the bundle)")
    return full
