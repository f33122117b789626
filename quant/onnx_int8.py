"""int8 for ONNX Runtime, written as a graph rewrite of the fp32 export: every Linear (the trunk's
MatMul + bias Add, and the task adapters' MatMulIntegerToFloat of export/onnx_ops.py) becomes
com.microsoft MatMulIntegerToFloat on int8 weights (symmetric, per output column) and activations
quantized per token (each row its own scale), and every embedding table is int8 per row.

Why not `onnxruntime.quantization.quantize_dynamic`: its activations share ONE range per tensor
(DynamicQuantizeLinear), so a few outlier tokens or channels of a trained BERT set the step for
every other row, and it stores embedding tables with one range each. On the 300-step model that
cost SST-5 about a point that ExecuTorch's per-token recipe does not (results/int8-gate.md).
MatMulIntegerToFloat takes a per-row scale for A ([..., M, 1]) and applies it to its output, but
only one zero point, so activations are symmetric: uint8 around a fixed zero point of 128. The
bias is added by its own Add: with a per-row A scale, MatMulIntegerToFloat (ONNX Runtime 1.31)
scales its bias input by that scale too.

Nodes reading adapter inputs keep their weights as graph inputs (overridable per run), and the
trunk Linears the int8 gate's fallback keeps in float (quant/mixed.py) stay MatMul + Add.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

MS = "com.microsoft"
SCHEME = ("linears (trunk MatMuls and task adapters): int8 weights, symmetric per output column, "
          "with int8 activations quantized per token (symmetric; com.microsoft "
          "MatMulIntegerToFloat, a per-row scale); embedding tables: int8 per row (gathered "
          "rows scaled after the lookup); LayerNorm and attention (MultiHeadAttention) fp32")
ZERO_POINT = 128   # uint8 activations: x / scale in [-127, 127], stored + 128


def _key(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def float_initializers(model, float_weights: dict[str, np.ndarray]) -> set[str]:
    """The weight initializers of the MatMul/Gemm nodes that are `float_weights` (matched by
    content: the legacy exporter's names do not say which module a MatMul came from, and
    constant folding stores a Linear's weight transposed)."""
    from onnx import numpy_helper

    wanted = {}
    for name, w in float_weights.items():
        wanted[_key(w)] = wanted[_key(w.T)] = name
    inits = {i.name: i for i in model.graph.initializer}
    found, kept = set(), set()
    for n in model.graph.node:
        if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in inits:
            name = wanted.get(_key(numpy_helper.to_array(inits[n.input[1]])))
            if name is not None:
                found.add(name)
                kept.add(n.input[1])
    missing = sorted(set(float_weights) - found)
    if missing:
        raise RuntimeError(f"no ONNX MatMul found for the float layers {missing}")
    return kept


def int8_rows(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 ([-127, 127]) with one fp32 scale per slice along `axis` (kept as a
    size-1 dimension elsewhere)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = np.maximum(np.abs(w).max(axis=other, keepdims=True) / 127, 1e-12).astype(np.float32)
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale


class _Rewrite:
    """The graph being rewritten: new nodes and initializers, one per-token quantization per
    activation however many Linears read it."""

    def __init__(self, model):
        from onnx import numpy_helper

        self.graph = model.graph
        self.inits = {i.name: i for i in self.graph.initializer}
        self.array = lambda name: numpy_helper.to_array(self.inits[name])
        self.nodes = list(self.graph.node)  # held, so id() names a node until finish()
        self.made = {o: n for n in self.nodes for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.quantized: dict[str, tuple[str, str]] = {}
        self.replace: dict[int, list] = {}   # id(old node) -> the nodes written in its place
        self.add_init(np.array(1 / 127, np.float32), "palkit_q/inv127")
        self.add_init(np.array(1e-30, np.float32), "palkit_q/tiny")
        self.add_init(np.array(ZERO_POINT, np.float32), "palkit_q/zero_f")
        self.add_init(np.array(ZERO_POINT, np.uint8), "palkit_q/zero")

    def add_init(self, value: np.ndarray, name: str) -> str:
        from onnx import numpy_helper

        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.inits[name] = self.graph.initializer[-1]
        return name

    def per_token(self, x: str) -> tuple[list, str, str]:
        """Nodes quantizing activation `x` per row of its last dimension (new ones only the
        first time), its uint8 tensor and its scale ([..., M, 1])."""
        from onnx import TensorProto, helper

        if x in self.quantized:
            return [], *self.quantized[x]
        p = f"palkit_q/per_token/{x}"
        nodes = [helper.make_node("Abs", [x], [f"{p}/abs"]),
                 helper.make_node("ReduceMax", [f"{p}/abs"], [f"{p}/max"], axes=[-1], keepdims=1),
                 helper.make_node("Mul", [f"{p}/max", "palkit_q/inv127"], [f"{p}/scale0"]),
                 helper.make_node("Max", [f"{p}/scale0", "palkit_q/tiny"], [f"{p}/scale"]),
                 helper.make_node("Div", [x, f"{p}/scale"], [f"{p}/steps"]),
                 helper.make_node("Round", [f"{p}/steps"], [f"{p}/round"]),
                 helper.make_node("Add", [f"{p}/round", "palkit_q/zero_f"], [f"{p}/shifted"]),
                 helper.make_node("Cast", [f"{p}/shifted"], [f"{p}/u8"], to=TensorProto.UINT8)]
        self.quantized[x] = (f"{p}/u8", f"{p}/scale")
        return nodes, *self.quantized[x]

    def linear(self, matmul) -> None:
        """MatMul(x, W) -> MatMulIntegerToFloat(per_token(x), int8 W); its bias Add stays."""
        from onnx import helper

        w = matmul.input[1]
        if f"{w}/int8" not in self.inits:  # a weight two MatMuls share is stored once
            q, scale = int8_rows(self.array(w), axis=1)   # W is [in, out]
            self.add_init(q, f"{w}/int8")
            self.add_init(scale.reshape(-1), f"{w}/scale")
        nodes, xq, xs = self.per_token(matmul.input[0])
        nodes.append(helper.make_node("MatMulIntegerToFloat",
                                      [xq, f"{w}/int8", xs, f"{w}/scale", "palkit_q/zero"],
                                      list(matmul.output), name=f"{matmul.name or w}/int8",
                                      domain=MS))
        self.replace[id(matmul)] = nodes

    def adapter_linear(self, node) -> None:
        """An adapter's MatMulIntegerToFloat fed by DynamicQuantizeLinear: per token instead."""
        import onnx
        from onnx import helper

        dql = self.made[node.input[0]]
        nodes, xq, xs = self.per_token(dql.input[0])
        rewired = onnx.NodeProto()
        rewired.CopyFrom(node)
        rewired.input[0], rewired.input[2], rewired.input[4] = xq, xs, "palkit_q/zero"
        nodes.append(rewired)
        if len(node.input) > 6 and node.input[6]:  # the bias, added apart (see the docstring)
            out = node.output[0]
            rewired.input[6], rewired.output[0] = "", f"{out}/unbiased"
            nodes.append(helper.make_node("Add", [f"{out}/unbiased", node.input[6]], [out]))
        self.replace[id(node)] = nodes
        if all(c is node or id(c) in self.replace for c in self.consumers[node.input[0]]):
            self.replace[id(dql)] = []

    def embedding(self, gather) -> None:
        """Gather(table, ids) -> Gather(int8 table, ids) * Gather(row scales, ids)."""
        from onnx import TensorProto, helper

        table = gather.input[0]
        if f"{table}/int8" not in self.inits:
            q, scale = int8_rows(self.array(table), axis=0)
            self.add_init(q, f"{table}/int8")
            self.add_init(scale, f"{table}/scale")  # [rows, 1]
        out, p = gather.output[0], f"palkit_q/per_row/{gather.output[0]}"
        self.replace[id(gather)] = [
            helper.make_node("Gather", [f"{table}/int8", gather.input[1]], [f"{p}/int8"]),
            helper.make_node("Cast", [f"{p}/int8"], [f"{p}/float"], to=TensorProto.FLOAT),
            helper.make_node("Gather", [f"{table}/scale", gather.input[1]], [f"{p}/scale"]),
            helper.make_node("Mul", [f"{p}/float", f"{p}/scale"], [out])]

    def finish(self) -> None:
        """Splice the new nodes in (each where its old node was: still topologically sorted)
        and drop the initializers nothing reads any more."""
        nodes = []
        for n in self.nodes:
            nodes += self.replace.get(id(n), [n])
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        read = {i for n in self.graph.node for i in n.input}
        read |= {o.name for o in self.graph.output}
        kept = [i for i in self.graph.initializer if i.name in read]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)


def quantize_trunk(src: Path, dst: Path, adapter_inputs: set[str],
                   float_weights: dict[str, np.ndarray] | None = None) -> None:
    """Write the int8 graph of the fp32 `src` to `dst` (the scheme in this module's docstring)."""
    import onnx

    model = onnx.load(str(src))
    rw = _Rewrite(model)
    keep = float_initializers(model, float_weights or {})
    for n in rw.nodes:
        weight = n.input[1] if len(n.input) > 1 else ""
        if (n.op_type == "MatMul" and weight not in keep and weight in rw.inits
                and weight not in adapter_inputs and len(rw.inits[weight].dims) == 2):
            rw.linear(n)
        elif (n.op_type == "MatMulIntegerToFloat" and n.input[0] in rw.made
              and rw.made[n.input[0]].op_type == "DynamicQuantizeLinear"):
            rw.adapter_linear(n)
        elif (n.op_type == "Gather" and n.input[0] in rw.inits
              and len(rw.inits[n.input[0]].dims) == 2):
            rw.embedding(n)
    rw.finish()
    if not any(o.domain == MS for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS, 1))
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
