"""The exported computations, as thin wrappers around the one PalBert (trainer/model.py).

* `TaskProgram`: one task end to end, as ExecuTorch runs it: (input_ids, attention_mask,
  token_type_ids) -> [1, num_outputs]; a regression task already outputs its score in
  score_range (regression_score inside the program).
* `AllTasksProgram`: every task on one input, one output per task (PalBert.forward_all).
* `SwappableTrunk`: the ONNX graph. The task's PAL and head are the same modules with each
  nn.Linear replaced by `GivenLinear` (identical F.linear) whose weight and bias come in as graph
  inputs, so one graph serves every task; the head is padded to `PAD_OUTPUTS` rows and a per-task
  output map (linear / sigmoid / offset vectors) turns raw outputs into logits or the score.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from quant.weights import dequantize_rows, quantize_rows
from trainer.model import PalBert, TaskHead, regression_score

# Fixed width of the ONNX output: the trunk file must not depend on which tasks a bundle holds.
PAD_OUTPUTS = 16
SLOT = "task"  # the adapter/head name inside the swappable graph
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def model_with_tasks(model: PalBert, tasks: list[str]) -> PalBert:
    """A deep copy of `model` holding only `tasks`' adapters and heads (in that order)."""
    m = copy.copy(model)
    m._modules = dict(model._modules)
    m.adapters = nn.ModuleDict({t: model.adapters[t] for t in tasks if t in model.adapters})
    m.heads = nn.ModuleDict({t: model.heads[t] for t in tasks})
    m.tasks = {t: model.tasks[t] for t in tasks}
    return copy.deepcopy(m).eval()


def task_outputs(spec, raw: torch.Tensor) -> torch.Tensor:
    """What a program returns for a task: class logits, or the regression score as [B, 1]."""
    return regression_score(spec, raw)[:, None] if spec.is_regression else raw


class TaskProgram(nn.Module):
    def __init__(self, model: PalBert, task: str):
        super().__init__()
        self.model = model_with_tasks(model, [task])
        self.task = task
        self.spec = model.tasks[task]

    def forward(self, input_ids, attention_mask, token_type_ids):
        return task_outputs(self.spec, self.model(input_ids, attention_mask, token_type_ids,
                                                  self.task))


class AllTasksProgram(nn.Module):
    """Every task on one input (PalBert.forward_all): one output per task, in `tasks` order.
    The trunk is in the program once, so all tasks are resident for about the memory of one."""

    def __init__(self, model: PalBert, tasks: list[str]):
        super().__init__()
        self.model = model_with_tasks(model, tasks)
        self.task_names = list(tasks)

    def forward(self, input_ids, attention_mask, token_type_ids):
        raw = self.model.forward_all(input_ids, attention_mask, token_type_ids)
        return tuple(task_outputs(self.model.tasks[t], raw[t]) for t in self.task_names)


def reference_outputs(model: PalBert, task: str, input_ids, attention_mask, token_type_ids):
    """What a bundle must reproduce: PyTorch fp32 logits, or the regression score as [B, 1]."""
    with torch.no_grad():
        return task_outputs(model.tasks[task], model(input_ids, attention_mask, token_type_ids, task))


class GivenLinear(nn.Module):
    """F.linear with weight and bias assigned just before each call (graph inputs on export)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


class SwappableTrunk(nn.Module):
    def __init__(self, model: PalBert, int8_adapters: bool):
        super().__init__()
        any_task = next(iter(model.tasks))
        m = copy.copy(model)
        m._modules = dict(model._modules)
        hidden = model.trunk.config.hidden_size
        m.adapters = nn.ModuleDict({SLOT: copy.deepcopy(model.adapters[any_task])}
                                   if any_task in model.adapters else {})
        m.heads = nn.ModuleDict({SLOT: TaskHead(hidden, PAD_OUTPUTS, 0.0)})
        m.tasks = {SLOT: model.tasks[any_task]}
        self.model = copy.deepcopy(m).eval()
        self.int8 = int8_adapters
        # Parameter names as in model.task_parameters(): "pal.…" and "head.…".
        self.param_names = list(model.task_parameters(any_task))
        self.slots: dict[str, tuple[GivenLinear, str]] = {}
        for prefix, root in self.model.task_modules(SLOT).items():
            for parent_name, parent in list(root.named_modules()):
                for child_name, child in list(parent.named_children()):
                    if isinstance(child, nn.Linear):
                        given = GivenLinear()
                        setattr(parent, child_name, given)
                        path = ".".join(p for p in (prefix, parent_name, child_name) if p)
                        self.slots[f"{path}.weight"] = (given, "weight")
                        self.slots[f"{path}.bias"] = (given, "bias")
        assert set(self.slots) == set(self.param_names), (sorted(self.slots), self.param_names)

    def adapter_input_names(self) -> list[str]:
        names = []
        for p in self.param_names:
            names += [f"{p}.int8", f"{p}.scale"] if self.int8 and p.endswith(".weight") else [p]
        return names + ["output.linear", "output.sigmoid", "output.offset"]

    def forward(self, input_ids, attention_mask, token_type_ids, *tensors):
        it = iter(tensors)
        for p in self.param_names:
            given, attr = self.slots[p]
            if self.int8 and p.endswith(".weight"):
                q, scale = next(it), next(it)
                setattr(given, attr, dequantize_rows(q, scale))
            else:
                setattr(given, attr, next(it))
        linear, sigmoid, offset = next(it), next(it), next(it)
        raw = self.model(input_ids, attention_mask, token_type_ids, SLOT)
        return linear * raw + sigmoid * torch.sigmoid(raw) + offset


def adapter_tensors(model: PalBert, task: str, int8: bool) -> dict[str, torch.Tensor]:
    """One task's inputs to SwappableTrunk, by input name (the .onnx_adapter contents)."""
    spec = model.tasks[task]
    if spec.num_outputs > PAD_OUTPUTS:
        raise ValueError(f"task '{task}' has {spec.num_outputs} outputs; the ONNX export "
                         f"supports at most {PAD_OUTPUTS}")
    out: dict[str, torch.Tensor] = {}
    for name, value in model.task_parameters(task).items():
        v = value.detach().float()
        if name.startswith("head."):
            padded = torch.zeros((PAD_OUTPUTS, *v.shape[1:]))
            padded[: v.shape[0]] = v
            v = padded
        if int8 and name.endswith(".weight"):
            out[f"{name}.int8"], out[f"{name}.scale"] = quantize_rows(v)
        else:
            out[name] = v.contiguous()
    linear, sigmoid, offset = (torch.zeros(PAD_OUTPUTS) for _ in range(3))
    if spec.is_regression:
        low, high = spec.score_range  # type: ignore[misc]
        sigmoid[0], offset[0] = high - low, low
    else:
        linear[: spec.num_outputs] = 1.0
    out.update({"output.linear": linear, "output.sigmoid": sigmoid, "output.offset": offset})
    return out
