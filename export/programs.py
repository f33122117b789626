"""The exported computations, as thin wrappers around the one PalBert (trainer/model.py).

`TaskSlotProgram` (ExecuTorch) and `SwappableTrunk` (ONNX) take every task-specific matrix as an
input, so one lowering or graph serves every task. The head is padded to the bundle's output
columns (`output_columns`) and a per-task output map (linear / sigmoid / offset vectors) turns raw
outputs into logits or the score. A task's output is [1 + seq, columns]: row 0 is the head on
the pooled [CLS] state (what a sentence task reads), row 1 + p the head on token p (what a
tagging task reads); the token rows cost a [seq, hidden] x [hidden, columns] multiply, well
under 1% of the trunk's. What ONNX Runtime runs for these is in export/onnx_ops.py.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

import palkit.trainer.model as model_code
from palkit.export import onnx_ops
from palkit.quant import onnx_int8
from palkit.quant.weights import quantize_rows
from palkit.trainer.model import (PalBert, PalConfig, ProjectedAttention, TaskAdapter, TaskHead,
                                  check_same_width, regression_score)

# A bundle's output width is a multiple of this, wide enough for its widest task: 16 for
# every task of up to 16 labels, so their programs do not depend on which tasks a bundle holds.
COLUMN_STEP = 16
SLOT = "task"  # the adapter/head name inside the swappable graph


def output_columns(model: PalBert) -> int:
    widest = max(spec.num_outputs for spec in model.tasks.values())
    return COLUMN_STEP * max(1, -(-widest // COLUMN_STEP))


def reference_outputs(model: PalBert, task: str, input_ids, attention_mask, token_type_ids):
    """What a bundle must reproduce: PyTorch fp32 logits [B, labels] (tag logits [B, S, tags]),
    or the regression score as [B, 1]."""
    spec = model.tasks[task]
    with torch.no_grad():
        raw = model(input_ids, attention_mask, token_type_ids, task)
        return regression_score(spec, raw)[:, None] if spec.is_regression else raw


class GivenLinear(nn.Module):
    """A task's nn.Linear in the swappable graph: bias and matrix (`given`, graph inputs) are
    assigned just before each call; export/onnx_ops.py says what ONNX Runtime runs."""

    bias: torch.Tensor
    given: tuple[torch.Tensor, ...]

    def forward(self, x):
        return onnx_ops.linear(x, self.bias, self.given)


class GivenAttention(nn.Module):
    """A PAL's ProjectedAttention in the swappable graph, with its query/key/value as one
    GivenLinear (d_s -> 3·d_s): one matrix multiply instead of three."""

    def __init__(self, heads: int, width: int):
        super().__init__()
        self.heads, self.width = heads, width
        self.qkv = GivenLinear()

    def forward(self, x, mask):
        q, k, v = self.qkv(x).split(self.width, dim=-1)  # a constant split: one Split node
        # looked up at call time: onnx_ops.fused_attention swaps it while the graph is traced
        return model_code.multi_head_attention(q, k, v, self.heads, mask, 0.0, False)


def given_modules(modules: dict[str, nn.Module]) -> list[tuple[str, str, nn.Module]]:
    """(adapter tensor path, module path under its prefix, module) of each matrix a task brings
    to the swappable graph, in a fixed order: every nn.Linear, and each PAL attention's
    query/key/value as one matrix (path `….qkv`)."""
    found = []

    def walk(prefix: str, module: nn.Module, path: str) -> None:
        for name, child in module.named_children():
            sub = f"{path}.{name}" if path else name
            if isinstance(child, ProjectedAttention):
                found.append((f"{prefix}.{sub}.qkv", sub, child))
            elif isinstance(child, nn.Linear):
                found.append((f"{prefix}.{sub}", sub, child))
            else:
                walk(prefix, child, sub)

    for prefix, root in modules.items():
        walk(prefix, root, "")
    return found


def given_suffixes(int8: bool) -> tuple[str, ...]:
    """The adapter tensors of one given matrix, after its path: the bias, then the matrix
    transposed ([in, out]), as fp32 or as int8 with one scale per output column."""
    return ("bias", "weight_t.int8", "weight_t.scale") if int8 else ("bias", "weight_t")


def slot_model(model: PalBert, placements: list[PalConfig | None], columns: int) -> PalBert:
    """An eval copy of `model` with one slot task per placement (slot_names): each with an
    adapter of that placement (None: a head only) and a head `columns` wide, the shapes every
    task of that placement gives its weights to at run time."""
    any_task = next(iter(model.tasks))
    m = copy.copy(model)
    m._modules = dict(model._modules)
    cfg = model.trunk.config
    slots = slot_names(len(placements))
    m.adapters = nn.ModuleDict({s: TaskAdapter(cfg.hidden_size, pal, 0.0)
                                for s, pal in zip(slots, placements) if pal is not None})
    m.heads = nn.ModuleDict({s: TaskHead(cfg.hidden_size, columns, 0.0) for s in slots})
    m.tasks = {s: model.tasks[any_task] for s in slots}
    return copy.deepcopy(m).eval()


def slot_names(n: int) -> list[str]:
    return [SLOT] if n == 1 else [f"{SLOT}{g}" for g in range(n)]


def graph_pal(pals: list[PalConfig | None]) -> PalConfig | None:
    """The placement of one ONNX graph serving tasks of these placements: theirs when the PAL
    tasks share one, else the union of their layers with one V^E/V^D per layer (so a task can
    leave a layer out); None when every task is head-only."""
    distinct = list(dict.fromkeys(p for p in pals if p is not None))
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    check_same_width(distinct[0], distinct[1:])
    layers = tuple(sorted({layer for p in distinct for layer in p.layers}))
    return PalConfig(distinct[0].size, distinct[0].heads, layers, share_projections=False)


def fits_graph(pal: PalConfig | None, graph: PalConfig | None) -> bool:
    """Whether a task of placement `pal` runs in a graph of placement `graph`: a head always
    (zeros in every PAL), PALs of the graph's own placement, or PALs in some of its layers when
    the graph has a V^E/V^D per layer."""
    if pal is None or pal == graph:
        return True
    return graph is not None and not graph.share_projections \
        and (pal.size, pal.heads) == (graph.size, graph.heads) \
        and set(pal.layers) <= set(graph.layers)


def adapter_in_graph(adapter: TaskAdapter | None, graph: PalConfig,
                     hidden_size: int) -> TaskAdapter:
    """A task's PALs laid out in the graph's placement: its own attention and V^E/V^D in each
    of its layers (a shared V^E/V^D copied into each of those layers' slots) and zeros in every
    other layer. A zero V^D (weight and bias) makes a PAL add gelu(0) = 0 exactly, so the task
    computes its own forward; a head-only task, the plain trunk. `adapter` must fit the graph
    (fits_graph)."""
    if adapter is not None and adapter.cfg == graph:
        return adapter
    out = TaskAdapter(hidden_size, graph, 0.0).eval()
    with torch.no_grad():
        for p in out.parameters():
            p.zero_()
        for layer in adapter.cfg.layers if adapter is not None else ():
            src, dst = adapter.slot_of_layer[layer], out.slot_of_layer[layer]
            out.attentions[dst].load_state_dict(adapter.attentions[src].state_dict())
            src_proj = 0 if adapter.cfg.share_projections else src
            out.encoders[dst].load_state_dict(adapter.encoders[src_proj].state_dict())
            out.decoders[dst].load_state_dict(adapter.decoders[src_proj].state_dict())
    return out


def head_rows(m: PalBert, slot: str, pooled: torch.Tensor, state: torch.Tensor,
              n: int) -> torch.Tensor:
    """The slot's head on the pooled [CLS] state `pooled` ([B, 1, d]: row 0) and on every token
    of `state` (rows 1..S): [n, 1 + S, columns]; a state of one row serves n tasks (a head-only
    group). The two multiplies stay apart: one over both would quantize the pooled row's int8
    activations with the token states' wider range."""
    if state.shape[0] != n:
        pooled, state = pooled.repeat(n, 1, 1), state.repeat(n, 1, 1)
    head = m.heads[slot].out
    return torch.cat([head(pooled), head(state)], dim=1)


OUTPUT_MAP = ("output.linear", "output.sigmoid", "output.offset")


class SwappableTrunk(nn.Module):
    """An ONNX graph: `model`'s trunk with one task slot per placement in `pals` (None: a head
    only), every slot's weights graph inputs. One slot is a one-task graph (trunk.onnx,
    head.onnx, ...: its inputs are what an .onnx_adapter overrides); several are the all-tasks
    graph: the trunk runs once up to where a slot's PALs begin (PalBert.branched), output
    [slots, 1 + S, columns] for one input."""

    def __init__(self, model: PalBert, int8_adapters: bool, pals: list[PalConfig | None],
                 columns: int):
        super().__init__()
        self.model = slot_model(model, pals, columns)
        self.int8 = int8_adapters
        self.names = slot_names(len(pals))
        # per slot: (adapter tensor path, its module)
        self.slots: list[list[tuple[str, GivenLinear]]] = []
        for slot in self.names:
            givens = []
            for prefix, root in self.model.task_modules(slot).items():
                for path, name, child in given_modules({prefix: root}):
                    attention = isinstance(child, ProjectedAttention)
                    given = GivenAttention(child.heads, child.query.out_features) if attention \
                        else GivenLinear()
                    root.set_submodule(name, given)
                    givens.append((path, given.qkv if attention else given))
            self.slots.append(givens)

    def adapter_input_names(self, slot: int = 0) -> list[str]:
        """The slot's task inputs in forward order, named as in an .onnx_adapter."""
        names = [f"{path}.{s}" for path, _ in self.slots[slot] for s in given_suffixes(self.int8)]
        return names + list(OUTPUT_MAP)

    def forward(self, input_ids, attention_mask, token_type_ids, *tensors):
        it = iter(tensors)
        maps = []
        for givens in self.slots:
            for _, given in givens:
                given.bias = next(it)
                given.given = tuple(next(it) for _ in given_suffixes(self.int8)[1:])
            maps.append((next(it), next(it), next(it)))
        m = self.model
        with onnx_ops.fused_attention(attention_mask):
            if len(self.names) == 1:
                states = [m.encode(input_ids, attention_mask, token_type_ids, self.names[0])]
            else:
                mask = model_code.additive_mask(attention_mask,
                                                m.trunk.embeddings.word_embeddings.weight.dtype)
                h = m.embed(input_ids, token_type_ids)
                states = m.branched(h, mask, [(m.first_adapted_layer(s), s, 1)
                                              for s in self.names])
        outs = []
        for slot, state, (linear, sigmoid, offset) in zip(self.names, states, maps):
            # BertPooler as PalBert runs it (a 2-D Gemm, which the int8 pass leaves in float)
            pooled = m.trunk.pooler(state)[:, None]
            raw = head_rows(m, slot, pooled, state, input_ids.shape[0])
            outs.append(linear * raw + sigmoid * torch.sigmoid(raw) + offset)
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class BmmLinear(nn.Module):
    """A task's nn.Linear in the ExecuTorch program: x·W + b for B stacked tasks, with W
    [B, in, out] and b [B, 1, out] method inputs (B = 1 for one task). A 3-D input weight read
    by bmm stays inside the XNNPACK delegate; as a 2-D mm it falls out of it (runtime/BUNDLE.md)."""

    def __init__(self, bound: dict[str, tuple[torch.Tensor, torch.Tensor]], path: str):
        super().__init__()
        self.bound, self.path = bound, path  # the program fills `bound` on each call

    def forward(self, x):
        weight, bias = self.bound[self.path]
        return torch.bmm(x, weight) + bias


def task_linears(modules: dict[str, nn.Module]) -> list[tuple[str, nn.Module, str, nn.Linear]]:
    """(task tensor path, parent module, attribute, nn.Linear) of every Linear a task brings,
    in a fixed order (the modules' registration order)."""
    found = []
    for prefix, root in modules.items():
        for name, module in root.named_modules():
            if isinstance(module, nn.Linear):
                parent, _, attr = name.rpartition(".")
                found.append((f"{prefix}.{name}", root.get_submodule(parent), attr, module))
    return found


class TaskSlotProgram(nn.Module):
    """An ExecuTorch method: tasks on one input, each task-specific matrix a method input.
    `groups` lists (placement, task count): [(pal, 1)] is a one-task method. Inputs: the three
    text inputs, then each group's `input_names(g)`, each [count, ...]; output [tasks, 1 + S,
    columns]: task t's rows (head_rows) through the same output map as the ONNX graph. The trunk
    runs once up to where a group's PALs begin (PalBert.branched)."""

    def __init__(self, model: PalBert, groups: list[tuple[PalConfig | None, int]], columns: int):
        super().__init__()
        self.counts = [n for _, n in groups]
        self.slots = slot_names(len(groups))
        self.model = slot_model(model, [pal for pal, _ in groups], columns)
        # a dict the forward fills, not tensor attributes: export refuses to see those assigned
        self.bound: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.paths: list[list[str]] = []
        for slot in self.slots:
            paths = []
            for path, parent, attr, _ in task_linears(self.model.task_modules(slot)):
                setattr(parent, attr, BmmLinear(self.bound, f"{slot}:{path}"))
                paths.append(path)
            self.paths.append(paths)

    def input_names(self, group: int = 0) -> list[str]:
        """The group's task inputs in method order: each matrix's weight ([in, out]) and bias,
        then the output map."""
        names = [f"{path}.{s}" for path in self.paths[group] for s in ("weight_t", "bias")]
        return names + list(OUTPUT_MAP)

    def forward(self, input_ids, attention_mask, token_type_ids, *tensors):
        it = iter(tensors)
        maps = []
        for slot, paths in zip(self.slots, self.paths):
            for path in paths:
                self.bound[f"{slot}:{path}"] = (next(it), next(it))
            maps.append((next(it), next(it), next(it)))
        m = self.model
        mask = model_code.additive_mask(attention_mask,
                                        m.trunk.embeddings.word_embeddings.weight.dtype)
        h = m.embed(input_ids, token_type_ids)
        states = m.branched(h, mask, [(m.first_adapted_layer(s), s, n)
                                      for s, n in zip(self.slots, self.counts)])
        outs = []
        for slot, n, state, (linear, sigmoid, offset) in zip(self.slots, self.counts, states, maps):
            # BertPooler on the [CLS] row kept 3-D, so that it stays in the XNNPACK delegate
            pooled = torch.tanh(m.trunk.pooler.dense(state[:, :1]))
            raw = head_rows(m, slot, pooled, state, n)
            outs.append(linear * raw + sigmoid * torch.sigmoid(raw) + offset)
        return outs[0] if len(outs) == 1 else torch.cat(outs)


def check_columns(model: PalBert, task: str, columns: int) -> None:
    outputs = model.tasks[task].num_outputs
    if outputs > columns:
        raise ValueError(f"task '{task}' has {outputs} outputs and the bundle's programs "
                         f"{columns} columns; export the bundle again with the task in it")


def padded_head(path: str, w: torch.Tensor, b: torch.Tensor,
                columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A head's [out, in] weight and bias padded with zero rows to `columns` outputs."""
    if not path.startswith("head."):
        return w, b
    return (torch.cat([w, w.new_zeros(columns - w.shape[0], w.shape[1])]),
            torch.cat([b, b.new_zeros(columns - b.shape[0])]))


def task_tensors(model: PalBert, task: str, columns: int) -> dict[str, torch.Tensor]:
    """One task's inputs to TaskSlotProgram by name, as one task's slice (the task's weights
    file): weight [1, in, out], bias [1, 1, out], output map [1, 1, columns], fp32."""
    check_columns(model, task, columns)
    out: dict[str, torch.Tensor] = {}
    for path, _, _, module in task_linears(model.task_modules(task)):
        w, b = padded_head(path, module.weight.detach().float(), module.bias.detach().float(),
                           columns)
        out[f"{path}.weight_t"] = w.t().contiguous()[None]
        out[f"{path}.bias"] = b[None, None].contiguous()
    out.update({k: v[None, None] for k, v in output_map(model.tasks[task], columns).items()})
    return out


def output_map(spec, columns: int) -> dict[str, torch.Tensor]:
    """The per-task vectors that turn the padded raw outputs into logits (classification,
    labels, tags) or the score mapped into score_range (regression, column 0)."""
    linear, sigmoid, offset = (torch.zeros(columns) for _ in range(3))
    if spec.is_regression:
        low, high = spec.score_range  # type: ignore[misc]
        sigmoid[0], offset[0] = high - low, low
    else:
        linear[: spec.num_outputs] = 1.0
    return dict(zip(OUTPUT_MAP, (linear, sigmoid, offset)))


def adapter_tensors(model: PalBert, task: str, int8: bool, graph: PalConfig | None,
                    columns: int) -> dict[str, torch.Tensor]:
    """One task's inputs to SwappableTrunk of placement `graph`, by input name (the
    .onnx_adapter contents)."""
    check_columns(model, task, columns)
    if not fits_graph(model.task_pal(task), graph):
        raise ValueError(f"task '{task}' has PALs {model.task_pal(task)}, which a graph of "
                         f"placement {graph} cannot run")
    modules = model.task_modules(task)
    if graph is not None:
        modules["pal"] = adapter_in_graph(modules.get("pal"), graph,  # type: ignore[arg-type]
                                          model.trunk.config.hidden_size)
    out: dict[str, torch.Tensor] = {}
    for path, _, module in given_modules(modules):
        # the [out, in] weight and bias it runs (q/k/v stacked for an attention)
        parts = (module.query, module.key, module.value) \
            if isinstance(module, ProjectedAttention) else (module,)
        w, b = padded_head(path, torch.cat([p.weight.detach().float() for p in parts]),
                           torch.cat([p.bias.detach().float() for p in parts]), columns)
        if int8:
            # the adapter's matrices multiply as the trunk's do
            q, scale = quantize_rows(w, onnx_int8.RANGES)
            values = (b, q.t(), scale)
        else:
            values = (b, w.t())
        out.update({f"{path}.{s}": v.contiguous() for s, v in zip(given_suffixes(int8), values)})
    out.update(output_map(model.tasks[task], columns))
    return out
