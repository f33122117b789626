"""How ExecuTorch and ONNX Runtime files are opened and run: a `TaskRunner` per runtime, under
runtime/engine.py's Engine.

Everything that runs a model file goes through here -- predict, demo, evaluate, export's
verification (through the Engine), bench's worker and the fuzzer (through the loaders below) --
so what bench times is what predict runs.

A `TaskRunner` reads every file through `bundle.path(rel)`, which checks its size and SHA-256
before first use, so a runner never loads a file the manifest does not vouch for.
"""
from __future__ import annotations

import functools
import sys
import types
import warnings
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from palkit.core.quiet import native_stderr_filtered
from palkit.runtime.manifest import TEXT_INPUTS, BundleError, Manifest, TaskEntry


class BundleFiles(Protocol):
    """What a runner needs of a bundle (runtime/bundle.py's Bundle is one): its folder and
    manifest, its tasks by name, and each file's path once checked against the manifest."""
    folder: Path
    manifest: Manifest
    tasks: dict[str, TaskEntry]
    checked: set[str]

    def path(self, rel: str, owner: str = "file") -> Path: ...


class TaskRunner(ABC):
    bundle: BundleFiles

    @abstractmethod
    def select(self, task: TaskEntry) -> None:
        """Make `task` the one `run` computes (its file is loaded the first time)."""

    @abstractmethod
    def run(self, task: TaskEntry, ids: np.ndarray, mask: np.ndarray,
            types: np.ndarray) -> np.ndarray:
        """The selected task's outputs for one input (TaskEntry.rows): logits, [score], or a
        row of tag logits per token."""

    def load_all(self) -> list[str]:
        """Load the bundle's all-tasks program (if not yet); returns its tasks in output order."""
        raise BundleError(f"{self.bundle.folder}: this runtime has no all-tasks program")

    def run_all(self, ids: np.ndarray, mask: np.ndarray,
                types: np.ndarray) -> dict[str, np.ndarray]:
        """Every task of the bundle's all-tasks program on one input, in one call."""
        raise BundleError(f"{self.bundle.folder}: this runtime has no all-tasks program")


@functools.cache
def executorch_lib() -> Any:
    """ExecuTorch's pybindings without `executorch.exir` (the compiler: seconds of imports that a
    runtime never uses; the pybindings' module only wants a warning class from it)."""
    import torch  # noqa: F401  (the pybindings link against libtorch_python)
    stubbed = []
    if "executorch.exir" not in sys.modules:
        import executorch  # noqa: F401
        pkg = types.ModuleType("executorch.exir")
        pkg.__path__ = []  # type: ignore[attr-defined]
        warn = types.ModuleType("executorch.exir._warnings")
        warn.ExperimentalWarning = type("ExperimentalWarning", (UserWarning,), {})  # type: ignore
        sys.modules["executorch.exir"], sys.modules["executorch.exir._warnings"] = pkg, warn
        stubbed = ["executorch.exir", "executorch.exir._warnings"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from executorch.extension.pybindings import portable_lib
    finally:
        for name in stubbed:
            sys.modules.pop(name, None)
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels)
    return portable_lib


def import_runtime(runtime: str) -> None:
    """Import a runtime's Python side as its runner does (for timing the import apart)."""
    if runtime == "executorch":
        executorch_lib()
    else:
        import onnxruntime  # noqa: F401


_executorch_threads: list[int] = []  # the count this process set, once
_executorch_programs_loaded = False


def set_executorch_threads(n: int) -> None:
    """Size ExecuTorch's one process-wide thread pool. Only before the first program loads:
    XNNPACK delegates keep the pool they were initialised with, so resetting it under loaded
    programs would run them on a freed pool."""
    if _executorch_threads == [n]:
        return
    if _executorch_programs_loaded:
        current = (_executorch_threads or ["its default"])[0]
        raise BundleError(f"ExecuTorch already runs programs on {current} threads in this "
                          f"process; it cannot switch to {n} (start a new process)")
    executorch_lib()._unsafe_reset_threadpool(n)
    _executorch_threads[:] = [n]


def load_executorch_program(pte: Path, data: Path | None = None) -> Any:
    """A program loaded with InternalConsistency verification: a mutated program is refused
    instead of crashing the process (docs/records/runtime-crashes.md), at no measurable cost.
    Raises RuntimeError (the pybindings' error, with its code) for a file it cannot load."""
    global _executorch_programs_loaded
    lib = executorch_lib()
    _executorch_programs_loaded = True
    with native_stderr_filtered():
        return lib._load_program(str(pte), data_path=None if data is None else str(data),
                                 program_verification=lib.Verification.InternalConsistency)


def ort_session(path: Path, threads: int | None) -> Any:
    """An ONNX Runtime CPU session, sequential, `threads` intra-op threads (None: its default).
    Raises one of ort_errors() for a file it cannot load."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # overridable initializers are intended: no warning per input
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_errors() -> tuple[type[BaseException], ...]:
    """What ONNX Runtime raises for a file it cannot load or an input it refuses (its own
    classes, not RuntimeError)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    return (RuntimeError, ort_state.Fail, ort_state.InvalidProtobuf, ort_state.InvalidGraph,
            ort_state.InvalidArgument, ort_state.NoSuchFile, ort_state.RuntimeException,
            ort_state.NotImplemented)


class ExecuTorchRunner(TaskRunner):
    """The bundle's one-task program, loaded once; a task is its weights file, read once and
    then passed as the method's task inputs, so a swap is choosing another task's tensors. Tasks
    whose files the bundle already checked are read at load, others on first use. Each method
    packs the trunk when it loads (the pip wheel has no XNNPACK weight cache to share it), so
    `forward` loads on the first single-task run and the all-tasks program on the first
    `run_all`: a caller of one holds nothing of the other. A method reads its inputs where they
    lie: nothing is copied per call (export/executorch_export.py)."""

    def __init__(self, bundle: BundleFiles, threads: int | None):
        self.bundle = bundle
        with native_stderr_filtered():  # the threadpool's start-up lines
            if threads:
                set_executorch_threads(threads)
            else:
                executorch_lib()
        self.section = bundle.manifest.runtimes["executorch"]
        self.trunk = bundle.path(self.section.trunk_data, "runtimes.executorch")
        self.program = self.load_program(self.section.program, "runtimes.executorch")
        self.methods: dict[str, Any] = {}  # one-task methods by name, loaded on first use
        self.weights: dict[str, tuple[Any, ...]] = {}
        for task in bundle.tasks.values():
            if task.files.get("executorch") in bundle.checked:
                self.task_weights(task)
        self.all_program: Any = None  # loaded with its method on the first run_all
        self.all_method: Any = None
        self.all_weights: tuple[Any, ...] = ()

    def load_program(self, rel: str, field: str) -> Any:
        pte = self.bundle.path(rel, field)
        try:
            return load_executorch_program(pte, self.trunk)
        except RuntimeError as e:  # the pybindings' errors carry an error code
            raise BundleError(f"{pte}: ExecuTorch cannot load it with {self.trunk.name} ({e}); "
                              "re-export the bundle") from None

    def load_method(self, program: Any, rel: str, name: str) -> Any:
        try:
            with native_stderr_filtered():
                return program.load_method(name)
        except RuntimeError as e:
            raise BundleError(f"{self.bundle.folder / rel}: ExecuTorch cannot load its method "
                              f"{name} ({e}); re-export the bundle") from None

    def task_weights(self, task: TaskEntry) -> tuple[Any, ...]:
        """The task's weights file as the method's task inputs, read once."""
        if task.name not in self.weights:
            path = self.bundle.path(task.files["executorch"], f"task '{task.name}'")
            _, inputs = self.bundle.manifest.executorch_method(task.name)
            self.weights[task.name] = read_task_weights(path, inputs)
        return self.weights[task.name]

    def select(self, task: TaskEntry) -> None:
        # the one-task method of the task's placement (`forward`, or a later task's own)
        name, _ = self.bundle.manifest.executorch_method(task.name)
        if name not in self.methods:
            self.methods[name] = self.load_method(self.program, self.section.program, name)
        self.current_method = self.methods[name]
        self.task_weights(task)
        self.current = task.name

    def run(self, task, ids, mask, types):
        out = self.current_method((*_torch_inputs(ids, mask, types),
                                   *self.weights[self.current]))[0]
        return task.rows(out.numpy()[0])

    def load_all(self) -> list[str]:
        spec = self.bundle.manifest.all_tasks("executorch")
        if spec is None:
            return super().load_all()
        if self.all_method is None:
            import torch

            # one group per placement, in order; a group's inputs each stacked over its tasks
            groups: dict[str, list[str]] = {}
            for t in spec.tasks:
                groups.setdefault(self.bundle.manifest.executorch_method(t)[0], []).append(t)
            stacked: list[Any] = []
            for names in groups.values():
                parts = [self.task_weights(self.bundle.tasks[t]) for t in names]
                group = tuple(torch.cat(p) for p in zip(*parts))
                # each task's tensors become views of the stacked ones: its weights held once
                for i, t in enumerate(names):
                    self.weights[t] = tuple(w[i:i + 1] for w in group)
                stacked += group
            self.all_weights = tuple(stacked)
            self.all_program = self.load_program(spec.program, "runtimes.executorch.all_tasks")
            self.all_method = self.load_method(self.all_program, spec.program, spec.method)
        return list(spec.tasks)

    def run_all(self, ids, mask, types):
        tasks = self.load_all()
        out = self.all_method((*_torch_inputs(ids, mask, types), *self.all_weights))[0].numpy()
        return {t: self.bundle.tasks[t].rows(out[i]) for i, t in enumerate(tasks)}


def read_task_weights(path: Path, names: list[str]) -> tuple[Any, ...]:
    """A task's weights file (safetensors) as fp32 tensors in the program's input order. An int8
    tensor (an int8 bundle's matrix) comes with its `<name>.scale`, one fp32 scale per output
    column, and is dequantized here, once: w = q * scale, the formula the app's JNI uses too
    (palkit_executorch_jni.cpp), so both runtimes pass the method the same bits."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise BundleError(f"{path}: not a readable task weights file ({e}); re-export the "
                          "bundle") from None
    scales = {n: f"{n}.scale" for n in names if n in tensors and tensors[n].dtype == torch.int8}
    if sorted(tensors) != sorted([*names, *scales.values()]):
        raise BundleError(f"{path}: holds other tensors than the bundle's program takes; "
                          "re-export the bundle")
    out = []
    for name in names:
        w = tensors[name]
        if name in scales:
            scale = tensors[scales[name]]
            per_column = [1] * (w.dim() - 1) + [w.shape[-1]]
            if scale.dtype != torch.float32 or list(scale.shape) != per_column:
                raise BundleError(f"{path}: '{scales[name]}' is not one float32 scale per column "
                                  f"of '{name}'; re-export the bundle")
            w = w.to(torch.float32) * scale
        elif w.dtype != torch.float32:
            raise BundleError(f"{path}: tensor '{name}' is {w.dtype}, neither float32 nor int8; "
                              "re-export the bundle")
        else:
            # load_file's tensors view the file's memory map: keeping one keeps the whole file
            # mapped and resident (an int8 file's bytes beside their fp32 copies)
            w = w.clone()
        out.append(w)
    return tuple(out)


def _torch_inputs(*arrays: np.ndarray) -> tuple[Any, ...]:
    import torch
    return tuple(torch.from_numpy(a) for a in arrays)


class OnnxRuntimeRunner(TaskRunner):
    """A session per one-task graph a selected task runs in (Manifest.onnx_graph: trunk.onnx,
    or its own placement's), started on first use; each task is a LoraAdapter applied through
    RunOptions. The all-tasks graph is a session of its own, started on the first `run_all`, fed
    every task's adapter tensors as inputs. All read the one trunk.onnx.data, checked first."""

    def __init__(self, bundle: BundleFiles, threads: int | None):
        import onnxruntime as ort

        self.bundle, self.ort, self.threads = bundle, ort, threads
        self.section = bundle.manifest.runtimes["onnxruntime"]
        if self.section.trunk_data is not None:
            bundle.path(self.section.trunk_data, "runtimes.onnxruntime")
        self.sessions: dict[str, Any] = {}   # by graph file
        self.adapters: dict[str, Any] = {}
        self.all_session: Any = None
        self.all_feed: dict[str, np.ndarray] = {}

    def start(self, rel: str, field: str) -> Any:
        path = self.bundle.path(rel, field)
        try:
            return ort_session(path, self.threads)
        except ort_errors() as e:
            raise BundleError(f"{path}: ONNX Runtime cannot load it ({e}); re-export") from None

    def adapter_path(self, task: TaskEntry) -> Path:
        return self.bundle.path(task.files["onnxruntime"], f"task '{task.name}'")

    def select(self, task: TaskEntry) -> None:
        if task.name not in self.adapters:
            path = self.adapter_path(task)
            adapter = self.ort.LoraAdapter()
            try:
                adapter.Load(str(path))
            except ort_errors() as e:
                raise BundleError(f"{path}: not a readable .onnx_adapter ({e}); re-export "
                                  "the bundle") from None
            options = self.ort.RunOptions()
            options.add_active_adapter(adapter)
            graph = self.bundle.manifest.onnx_graph(self.bundle.manifest.adapter(task.name)).model
            if graph not in self.sessions:
                self.sessions[graph] = self.start(graph, "runtimes.onnxruntime")
            self.adapters[task.name] = (adapter, options, self.sessions[graph])
        _, self.current, self.session = self.adapters[task.name]

    def run(self, task, ids, mask, types):
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return task.rows(self.session.run(["logits"], feed, self.current)[0][0])

    def load_all(self) -> list[str]:
        spec = self.section.all_tasks
        if spec is None:
            return super().load_all()
        if self.all_session is None:
            feed = {}
            for t in spec.tasks:
                path = self.adapter_path(self.bundle.tasks[t])
                try:
                    tensors = self.ort.AdapterFormat.read_adapter(str(path)).get_parameters()
                except ort_errors() as e:
                    raise BundleError(f"{path}: not a readable .onnx_adapter ({e}); re-export "
                                      "the bundle") from None
                # copies: the arrays view memory the adapter frees with `tensors`
                feed.update({f"{t}/{name}": v.numpy().copy() for name, v in tensors.items()})
            session = self.start(spec.model, "runtimes.onnxruntime.all_tasks")
            wanted = [i.name for i in session.get_inputs() if i.name not in TEXT_INPUTS]
            missing = [n for n in wanted if n not in feed]
            if missing:
                raise BundleError(f"{self.bundle.folder / spec.model}: takes {missing[0]}, which "
                                  "no task's .onnx_adapter holds; re-export the bundle")
            self.all_feed = {n: feed[n] for n in wanted}
            self.all_session = session
        return list(spec.tasks)

    def run_all(self, ids, mask, types):
        tasks = self.load_all()
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, **self.all_feed}
        out = self.all_session.run(["logits"], feed)[0]
        return {t: self.bundle.tasks[t].rows(out[i]) for i, t in enumerate(tasks)}


RUNNERS: dict[str, type[TaskRunner]] = {"executorch": ExecuTorchRunner,
                                        "onnxruntime": OnnxRuntimeRunner}
