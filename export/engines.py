"""The two runtime engines behind one small interface (as the Android app has them).

A `TaskRunner` loads a bundle's trunk for one runtime, `select`s a task (loading that task's
file on first use), `run`s the selected task on token ids, and may `run_all` tasks at once.
Files come from `bundle.path(rel)`, which checks each file's size and SHA-256 before its first
use, so a runner never loads a file the manifest does not vouch for.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

from export.manifest import BundleError, TaskEntry
from ui.quiet import native_stderr_filtered

if TYPE_CHECKING:
    from export.runtime import Bundle


class TaskRunner(ABC):
    def __init__(self, bundle: "Bundle", threads: int | None):
        self.bundle = bundle
        self.threads = threads

    @abstractmethod
    def select(self, task: TaskEntry) -> None:
        """Make `task` the one `run` computes (its file is loaded the first time)."""

    @abstractmethod
    def run(self, task: TaskEntry, ids: np.ndarray, mask: np.ndarray,
            types: np.ndarray) -> np.ndarray:
        """The selected task's outputs for one input: logits, or [score] for regression."""

    def run_all(self, ids: np.ndarray, mask: np.ndarray,
                types: np.ndarray) -> dict[str, np.ndarray]:
        """Every task of the bundle's all-tasks program on one input, in one call."""
        raise BundleError(f"{self.bundle.folder}: this runtime has no all-tasks program")


def set_executorch_threads(n: int) -> None:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    _unsafe_reset_threadpool(n)


class ExecuTorchRunner(TaskRunner):
    """Per-task programs that share trunk.ptd; each program is loaded once, then kept."""

    ALL_TASKS = "__all_tasks__"  # the all-tasks program's slot among the loaded programs

    def __init__(self, bundle: "Bundle", threads: int | None):
        import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels)
        from executorch.runtime import Runtime

        super().__init__(bundle, threads)
        with native_stderr_filtered():  # the threadpool's start-up lines
            if threads:
                set_executorch_threads(threads)
            self.runtime = Runtime.get()
        self.trunk = bundle.path(bundle.manifest.trunk_file("executorch"))
        self.methods: dict[str, Any] = {}

    def _method(self, key: str, rel: str) -> Any:
        if key not in self.methods:
            pte = self.bundle.path(rel)
            try:
                with native_stderr_filtered():
                    program = self.runtime.load_program(str(pte), data_path=str(self.trunk))
                    self.methods[key] = program.load_method("forward")
            except RuntimeError as e:  # the pybindings' errors carry an error code
                raise BundleError(f"{pte}: ExecuTorch cannot load it with {self.trunk.name} "
                                  f"({e}); re-export the bundle") from None
        return self.methods[key]

    def select(self, task: TaskEntry) -> None:
        self.current = self._method(task.name, task.files["executorch"])

    def run(self, task, ids, mask, types):
        import torch
        out = self.current.execute([torch.from_numpy(ids), torch.from_numpy(mask),
                                    torch.from_numpy(types)])[0]
        return out.numpy()[0, : task.num_outputs]

    def run_all(self, ids, mask, types):
        import torch
        program = self.bundle.manifest.all_tasks("executorch")
        method = self._method(self.ALL_TASKS, program.file)
        outs = method.execute([torch.from_numpy(ids), torch.from_numpy(mask),
                               torch.from_numpy(types)])
        return {t: o.numpy()[0, : self.bundle.tasks[t].num_outputs]
                for t, o in zip(program.tasks, outs)}


def _ort_errors() -> tuple[type[BaseException], ...]:
    """What ONNX Runtime raises for a file it cannot load (its own classes, not RuntimeError)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    return (RuntimeError, ort_state.Fail, ort_state.InvalidProtobuf, ort_state.InvalidGraph,
            ort_state.InvalidArgument, ort_state.NoSuchFile, ort_state.RuntimeException)


class OnnxRuntimeRunner(TaskRunner):
    """One session on trunk.onnx; each task is a LoraAdapter applied through RunOptions."""

    def __init__(self, bundle: "Bundle", threads: int | None):
        import onnxruntime as ort

        super().__init__(bundle, threads)
        self.ort = ort
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # overridable initializers are intended: no warning per input
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        trunk = bundle.path(bundle.manifest.trunk_file("onnxruntime"))
        try:
            self.session = ort.InferenceSession(str(trunk), opts,
                                                providers=["CPUExecutionProvider"])
        except _ort_errors() as e:
            raise BundleError(f"{trunk}: ONNX Runtime cannot load it ({e}); re-export") from None
        self.adapters: dict[str, Any] = {}

    def select(self, task: TaskEntry) -> None:
        if task.name not in self.adapters:
            path = self.bundle.path(task.files["onnxruntime"])
            adapter = self.ort.LoraAdapter()
            try:
                adapter.Load(str(path))
            except _ort_errors() as e:
                raise BundleError(f"{path}: not a readable .onnx_adapter ({e}); re-export "
                                  "the bundle") from None
            options = self.ort.RunOptions()
            options.add_active_adapter(adapter)
            self.adapters[task.name] = (adapter, options)
        self.current = self.adapters[task.name][1]

    def run(self, task, ids, mask, types):
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.session.run(["logits"], feed, self.current)[0][0, : task.num_outputs]


RUNNERS: dict[str, type[TaskRunner]] = {"executorch": ExecuTorchRunner,
                                        "onnxruntime": OnnxRuntimeRunner}
