"""int8 for ONNX Runtime, written as a graph rewrite of the fp32 export: every Linear (the trunk's
MatMul + bias Add, and the task adapters' MatMulIntegerToFloat of export/onnx_ops.py) becomes
com.microsoft MatMulIntegerToFloat on int8 weights (symmetric, per output column, within RANGES
so that no CPU saturates) and activations quantized per token (each row its own scale and zero
point), and the word embedding table is int8 per row (the position and token-type tables stay
fp32: quant/weights.py).

Why not `onnxruntime.quantization.quantize_dynamic`: its activations share ONE range per tensor
(DynamicQuantizeLinear), so a few outlier tokens or channels of a trained BERT set the step for
every other row; on the 300-step model that cost SST-5 about a point (results/int8-gate.md).

Activations are asymmetric, as XNNPACK's: each row's 255 steps span [min(x, 0), max(x, 0)], so
a skewed input (a GELU output is >= -0.17) gets about twice the resolution of a range mirrored
around 0. MatMulIntegerToFloat takes a per-row scale for A ([..., M, 1]) but only one zero point
(a per-row one is refused: microsoft/onnxruntime#27897), so it runs with zero point 0
and each row's zero point z_r comes out after the product, with the bias, in one Gemm:
    sum_k s_r (q_rk - z_r) s_c w_kc + b_c
        = [s_r s_c sum_k q_rk w_kc] + [-s_r z_r, 1] @ [[s_c sum_k w_kc], [b_c]],
an [R, 2] @ [2, N] product added to MatMulIntegerToFloat's output (the weight's row of scaled
column sums is stored with its bias; an adapter's is computed in the graph, its matrix being an
input; not MatMulIntegerToFloat's own bias input, which ONNX Runtime 1.31 scales by a per-row
A scale too). Rows are quantized by one QuantizeLinear with a per-axis scale and zero point
(elementwise ops ran ~11% slower: docs/int8-gate.md), so an activation's leading dimensions are
flattened into rows first and the output reshaped back.

Nodes reading adapter inputs keep their weights as graph inputs (overridable per run), and the
trunk Linears the int8 gate's fallback keeps in float (quant/mixed.py) stay MatMul + Add.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from palkit.quant.weights import ProductRanges, is_int8_table, quantize_rows

MS = "com.microsoft"
# Full 8-bit activations and weights, with each two neighbouring weights of a column within
# 128 together: 255 x 128 = 32,640 fits x86's 16-bit pairs, so every CPU computes the exact
# product. A column whose largest pair needs it gets a coarser scale (a median 1.37x on MiniLM;
# 7-bit weights would be 2x). Measured against the other ways to fit: results/int8-ranges.md.
RANGES = ProductRanges(activation_steps=255, weight_max=127, weight_pair_max=128)
SCHEME = ("linears (trunk MatMuls and task adapters): int8 weights, symmetric per output column, "
          "each two neighbouring inputs' weights within 128 together, with uint8 activations "
          "quantized per token (asymmetric: a scale and zero point per row; com.microsoft "
          "MatMulIntegerToFloat, the zero point folded out after the product; exact on every "
          "CPU); word embeddings: int8 per row (gathered rows scaled after the lookup); "
          "position and token-type embeddings, LayerNorm and attention (MultiHeadAttention) "
          "fp32")


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


def int8_rows(w: np.ndarray, axis: int,
              ranges: ProductRanges | None = None) -> tuple[np.ndarray, np.ndarray]:
    """quant/weights.py's per-row int8 (within `ranges`' weights, pairs along the other axis)
    with one fp32 scale per slice along `axis` (kept as a size-1 dimension elsewhere)."""
    rows = np.moveaxis(w, axis, 0)
    q, scale = quantize_rows(torch.from_numpy(rows.reshape(len(rows), -1).copy()), ranges)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.moveaxis(q.numpy().reshape(rows.shape), 0, axis), scale.numpy().reshape(shape)


class _Rewrite:
    """The graph being rewritten: new nodes and initializers, one per-token quantization per
    activation however many Linears read it."""

    def __init__(self, model, symmetric: bool, ranges: ProductRanges):
        from onnx import numpy_helper

        self.graph = model.graph
        self.symmetric = symmetric
        self.ranges = ranges
        self.inits = {i.name: i for i in self.graph.initializer}
        self.array = lambda name: numpy_helper.to_array(self.inits[name])
        self.nodes = list(self.graph.node)  # held, so id() names a node until finish()
        self.made = {o: n for n in self.nodes for o in n.output}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.quantized: dict[str, tuple[str, str, str]] = {}
        self.terms: dict[tuple[str, str | None], str] = {}
        self.replace: dict[int, list] = {}   # id(old node) -> the nodes written in its place
        half = ranges.activation_steps // 2  # symmetric rows: half the steps each side of 0
        for value, name in [(0, "zero_f"), (1, "one"), (1 / half, "inv_half"),
                            (1 / ranges.activation_steps, "inv_steps"), (1e-30, "tiny"),
                            (half, "mid_f")]:
            self.add_init(np.array(value, np.float32), f"palkit_q/{name}")
        self.add_init(np.array(half, np.uint8), "palkit_q/mid")
        for value, name in [([0], "axis0"), ([1], "axis1"), ([-1], "minus1"),
                            ([0, 0, 0, 1], "ones_column")]:  # Pad: [R, 1] -> [R, 2], 1 after
            self.add_init(np.array(value, np.int64), f"palkit_q/{name}")

    def add_init(self, value: np.ndarray, name: str) -> str:
        from onnx import numpy_helper

        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.inits[name] = self.graph.initializer[-1]
        return name

    def per_token(self, x: str) -> tuple[list, str, str, str]:
        """Nodes quantizing activation `x` per row of its last dimension (new ones only the
        first time), and the names of: its uint8 rows, their scales s_r ([R, 1]) and the
        [R, 2] matrix [-s_r z_r, 1] (asymmetric: x's leading dimensions flattened into R rows,
        QuantizeLinear's per-axis scale and zero point being 1-D; the output's shape is
        `{p}/out_shape`). Symmetric: x keeps its shape, scales [..., M, 1], no matrix (its
        fixed zero point MatMulIntegerToFloat takes)."""
        from onnx import TensorProto, helper

        if x in self.quantized:
            return [], *self.quantized[x]
        p = f"palkit_q/per_token/{x}"
        node = helper.make_node
        if self.symmetric:  # x / s_r in [-half, half], stored + half
            nodes = [node("Abs", [x], [f"{p}/abs"]),
                     node("ReduceMax", [f"{p}/abs"], [f"{p}/max"], axes=[-1], keepdims=1),
                     node("Mul", [f"{p}/max", "palkit_q/inv_half"], [f"{p}/scale0"]),
                     node("Max", [f"{p}/scale0", "palkit_q/tiny"], [f"{p}/scale"]),
                     node("Div", [x, f"{p}/scale"], [f"{p}/steps"]),
                     node("Round", [f"{p}/steps"], [f"{p}/round"]),
                     node("Add", [f"{p}/round", "palkit_q/mid_f"], [f"{p}/shifted"]),
                     node("Cast", [f"{p}/shifted"], [f"{p}/u8"], to=TensorProto.UINT8)]
            self.quantized[x] = (f"{p}/u8", f"{p}/scale", "")
            return nodes, *self.quantized[x]
        nodes = [node("Flatten", [x], [f"{p}/rows"], axis=-1),   # [R, K]
                 node("ReduceMin", [f"{p}/rows"], [f"{p}/min"], axes=[1], keepdims=0),
                 node("Min", [f"{p}/min", "palkit_q/zero_f"], [f"{p}/low"]),
                 node("ReduceMax", [f"{p}/rows"], [f"{p}/max"], axes=[1], keepdims=0),
                 node("Max", [f"{p}/max", "palkit_q/zero_f"], [f"{p}/high"]),
                 node("Sub", [f"{p}/high", f"{p}/low"], [f"{p}/span"]),
                 node("Mul", [f"{p}/span", "palkit_q/inv_steps"], [f"{p}/scale0"]),
                 node("Max", [f"{p}/scale0", "palkit_q/tiny"], [f"{p}/scale"]),
                 node("Div", [f"{p}/low", f"{p}/scale"], [f"{p}/low_steps"]),
                 node("Round", [f"{p}/low_steps"], [f"{p}/minus_zero"]),    # -z_r
                 node("Neg", [f"{p}/minus_zero"], [f"{p}/zero"]),
                 node("Cast", [f"{p}/zero"], [f"{p}/zero_u8"], to=TensorProto.UINT8),
                 node("QuantizeLinear", [f"{p}/rows", f"{p}/scale", f"{p}/zero_u8"], [f"{p}/u8"],
                      axis=0),
                 node("Unsqueeze", [f"{p}/scale", "palkit_q/axis1"], [f"{p}/scale_col"]),
                 node("Mul", [f"{p}/minus_zero", f"{p}/scale"], [f"{p}/zero_term"]),
                 node("Unsqueeze", [f"{p}/zero_term", "palkit_q/axis1"], [f"{p}/zero_col"]),
                 node("Pad", [f"{p}/zero_col", "palkit_q/ones_column", "palkit_q/one"],
                      [f"{p}/terms"]),
                 node("Shape", [x], [f"{p}/lead"], end=-1),
                 node("Concat", [f"{p}/lead", "palkit_q/minus1"], [f"{p}/out_shape"], axis=0)]
        self.quantized[x] = (f"{p}/u8", f"{p}/scale_col", f"{p}/terms")
        return nodes, *self.quantized[x]

    def row_terms(self, w: str, scale: str, bias: str | None) -> tuple[list, str]:
        """[[s_c sum_k w_kc], [bias_c]] ([2, N]) for int8 matrix `w` ([in, out]) with column
        scales `scale`: stored when `w` is an initializer, else computed in the graph (an
        adapter input, replaced per run); new nodes only the first time."""
        from onnx import TensorProto, helper

        if (w, bias) in self.terms:
            return [], self.terms[w, bias]
        out = f"palkit_q/row_terms/{w}/{bias or 'no_bias'}"  # a shared weight, other biases
        if w in self.inits:
            sums = self.array(w).astype(np.float32).sum(axis=0) * self.array(scale)
            b = self.array(bias) if bias else np.zeros_like(sums)
            self.add_init(np.stack([sums, b]).astype(np.float32), out)
            nodes = []
        else:
            node = helper.make_node
            nodes = [node("Cast", [w], [f"{out}/float"], to=TensorProto.FLOAT),
                     node("ReduceSum", [f"{out}/float", "palkit_q/axis0"], [f"{out}/sum"],
                          keepdims=1),
                     node("Mul", [f"{out}/sum", scale], [f"{out}/sums"])]
            if bias:
                nodes.append(node("Unsqueeze", [bias, "palkit_q/axis0"], [f"{out}/bias"]))
            else:
                nodes.append(node("Mul", [f"{out}/sums", "palkit_q/zero_f"], [f"{out}/bias"]))
            nodes.append(node("Concat", [f"{out}/sums", f"{out}/bias"], [out], axis=0))
        self.terms[w, bias] = out
        return nodes, out

    def integer_linear(self, x: str, w: str, w_scale: str, bias: str | None, out: str,
                       name: str) -> list:
        """Nodes computing x @ dequantized(w) + bias into `out`, x quantized per token."""
        from onnx import helper

        nodes, xq, xs, terms = self.per_token(x)
        if self.symmetric:
            product = out if bias is None else f"{out}/unbiased"
            nodes.append(helper.make_node("MatMulIntegerToFloat",
                                          [xq, w, xs, w_scale, "palkit_q/mid"], [product],
                                          name=name, domain=MS))
            if bias is not None:
                nodes.append(helper.make_node("Add", [product, bias], [out]))
            return nodes
        # [R, 2] @ [2, N]: each row's zero point term and the bias, added to the product
        term_nodes, rows = self.row_terms(w, w_scale, bias)
        return nodes + term_nodes + [
            helper.make_node("MatMulIntegerToFloat", [xq, w, xs, w_scale], [f"{out}/raw"],
                             name=name, domain=MS),
            helper.make_node("Gemm", [terms, rows, f"{out}/raw"], [f"{out}/rows"]),
            helper.make_node("Reshape", [f"{out}/rows", f"palkit_q/per_token/{x}/out_shape"],
                             [out])]

    def bias_add(self, matmul):
        """The Add of a bias initializer that alone reads `matmul`'s output, if any."""
        readers = self.consumers.get(matmul.output[0], [])
        if len(readers) != 1 or readers[0].op_type != "Add":
            return None
        other = [i for i in readers[0].input if i != matmul.output[0]]
        bias = len(other) == 1 and other[0] in self.inits and len(self.inits[other[0]].dims) == 1
        return readers[0] if bias else None

    def linear(self, matmul) -> None:
        """MatMul(x, W) [+ bias] -> per_token(x) times int8 W [+ bias]."""
        w = matmul.input[1]
        if f"{w}/int8" not in self.inits:  # a weight two MatMuls share is stored once
            q, scale = int8_rows(self.array(w), axis=1, ranges=self.ranges)  # W is [in, out]
            self.add_init(q, f"{w}/int8")
            self.add_init(scale.reshape(-1), f"{w}/scale")
        add = self.bias_add(matmul)
        bias, out = None, matmul.output[0]
        if add is not None:
            bias = next(i for i in add.input if i != out)
            out = add.output[0]
            self.replace[id(add)] = []
        self.replace[id(matmul)] = self.integer_linear(
            matmul.input[0], f"{w}/int8", f"{w}/scale", bias, out, f"{matmul.name or out}/int8")

    def adapter_linear(self, node) -> None:
        """An adapter's MatMulIntegerToFloat fed by DynamicQuantizeLinear: per token instead."""
        dql = self.made[node.input[0]]
        bias = node.input[6] if len(node.input) > 6 and node.input[6] else None
        self.replace[id(node)] = self.integer_linear(dql.input[0], node.input[1], node.input[3],
                                                     bias, node.output[0], node.name or node.output[0])
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
        read = {i for n in self.graph.node for i in n.input} | {o.name for o in self.graph.output}
        kept = [i for i in self.graph.initializer if i.name in read]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)


def quantize_trunk(src: Path, dst: Path, adapter_inputs: set[str],
                   float_weights: dict[str, np.ndarray] | None = None, *,
                   symmetric_activations: bool = False,
                   ranges: ProductRanges | None = None) -> None:
    """Write the int8 graph of the fp32 `src` to `dst` (the scheme in this module's docstring;
    `symmetric_activations`: each row's range mirrored around 0 instead, the recipe before
    asymmetric rows, kept for lab/int8_gate.py's side-by-side measurement)."""
    import onnx

    model = onnx.load(str(src))
    rw = _Rewrite(model, symmetric_activations, ranges or RANGES)
    keep = float_initializers(model, float_weights or {})
    for n in rw.nodes:
        weight = n.input[1] if len(n.input) > 1 else ""
        if (n.op_type == "MatMul" and weight not in keep and weight in rw.inits
                and weight not in adapter_inputs and len(rw.inits[weight].dims) == 2):
            rw.linear(n)
        elif (n.op_type == "MatMulIntegerToFloat" and n.input[0] in rw.made
              and rw.made[n.input[0]].op_type == "DynamicQuantizeLinear"):
            rw.adapter_linear(n)
        elif (n.op_type == "Gather" and n.input[0] in rw.inits and is_int8_table(n.input[0])
              and len(rw.inits[n.input[0]].dims) == 2):
            rw.embedding(n)
    rw.finish()
    if not any(o.domain == MS for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS, 1))
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
