"""The peers palkit races: each builds one task's separately fine-tuned model the usual way.

    torch      PyTorch eager fp32: the model folder as trained (PalBert with no PALs, the same
               math as transformers' BertModel + our head); nothing to build.
    ort-int8   Optimum's ONNX Runtime int8 recipe, reproduced with ONNX Runtime's own tools:
               legacy torch.onnx export (dynamo=False) of transformers' BertModel with eager
               attention + our head, onnxruntime.transformers.optimize_model(model_type="bert")
               (EmbedLayerNormalization / Attention / SkipLayerNormalization / BiasGelu), then
               quantize_dynamic (int8 weights, per tensor, as Optimum's avx2/arm64 dynamic
               configs; uint8 activations).
    et-int8    Plain ExecuTorch XNNPACK int8: eager attention, int8 embeddings (torchao
               IntxWeightOnlyConfig), a 4-D additive float mask as input, dynamic int8
               activations and per-channel int8 weights (XNNPACKQuantizer + PT2E).

Each builder writes one file into `out_dir` and returns a worker SOURCE (see bench/worker.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from palkit.bench.schema import BenchError
from palkit.runtime.manifest import TEXT_INPUTS
from palkit.export.onnx_export import OPSET
from palkit.trainer.checkpoint import load_model, resolve_model_dir

PEER_RUNTIME = {"torch": "torch", "ort-int8": "onnxruntime", "et-int8": "executorch"}
PEER_LABEL = {"torch": "PyTorch eager fp32", "ort-int8": "ORT int8 (Optimum recipe)",
              "et-int8": "ExecuTorch XNNPACK int8 (plain)"}


def _single_task(model_dir: Path):
    model, tokenizer, _ = load_model(model_dir)
    if len(model.tasks) != 1 or model.pal is not None:
        raise BenchError(f"{model_dir}: a peer is one separately fine-tuned model (one task, no "
                         f"PALs); this folder has tasks {list(model.tasks)} and PALs "
                         f"{'on' if model.pal else 'off'}")
    return model, next(iter(model.tasks.values()))


def _score(spec, raw: torch.Tensor) -> torch.Tensor:
    from palkit.trainer.model import regression_score
    return regression_score(spec, raw) if spec.is_regression else raw


class HfClassifier(nn.Module):
    """transformers' BertModel (eager attention) + our head: what Optimum exports."""

    def __init__(self, model, spec):
        super().__init__()
        self.trunk, self.out, self.spec = model.trunk, model.heads[spec.name].out, spec

    def forward(self, input_ids, attention_mask, token_type_ids):
        pooled = self.trunk(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids).pooler_output
        return _score(self.spec, self.out(pooled))


class Mask4dClassifier(nn.Module):
    """The same math with the additive [B, 1, 1, S] float mask as an input (no mask ops)."""

    def __init__(self, model, spec):
        super().__init__()
        self.model, self.spec = model, spec

    def forward(self, input_ids, token_type_ids, mask):
        m = self.model
        h = m.embed(input_ids, token_type_ids)
        for i in range(len(m.trunk.encoder.layer)):
            h = m.layer(i, h, mask, None)
        return _score(self.spec, m.head(self.spec.name, h))


def build_ort_int8(model_dir: Path, out_dir: Path, seq_len: int = 128) -> dict[str, Any]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    model, spec = _single_task(resolve_model_dir(model_dir))
    wrapper = HfClassifier(model, spec).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32, opt, q = (out_dir / f"{spec.name}.{kind}.onnx" for kind in ("fp32", "opt", "int8"))
    ex = (torch.ones(1, seq_len, dtype=torch.long), torch.ones(1, seq_len, dtype=torch.long),
          torch.zeros(1, seq_len, dtype=torch.long))
    names = list(TEXT_INPUTS)
    with torch.no_grad():
        torch.onnx.export(wrapper, ex, str(fp32), input_names=names, output_names=["logits"],
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
                          opset_version=OPSET, dynamo=False)
    cfg = model.trunk.config
    optimized = optimize_model(str(fp32), model_type="bert", num_heads=cfg.num_attention_heads,
                               hidden_size=cfg.hidden_size)
    fused = optimized.get_fused_operator_statistics()
    optimized.save_model_to_file(str(opt))
    quantize_dynamic(str(opt), str(q), per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    fp32.unlink()
    opt.unlink()
    return {"format": "onnx", "path": str(q),
            "fused": {k: v for k, v in fused.items() if v}}


def build_et_int8(model_dir: Path, out_dir: Path, max_len: int = 128,
                  calibration: int = 4) -> dict[str, Any]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from palkit.export.executorch_export import infer_sequence_size

    model, spec = _single_task(resolve_model_dir(model_dir))
    wrapper = Mask4dClassifier(model, spec).eval()
    emb = model.trunk.embeddings
    for table in (emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings):
        table.padding_idx = None  # inference unchanged; the int8 embedding op has no padding
    quantize_(wrapper, IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
              filter_fn=lambda m, _fqn: isinstance(m, nn.Embedding))

    vocab = model.trunk.config.vocab_size

    def example(s: int):
        ids = torch.randint(*((1000, min(vocab, 20000)) if vocab > 1000 else (5, vocab)), (1, s))
        types = torch.zeros(1, s, dtype=torch.long)
        types[:, s // 2:] = 1
        return ids, types, torch.zeros(1, 1, 1, s)

    seq = torch.export.Dim("seq", min=2, max=max_len)
    dyn = ({1: seq}, {1: seq}, {3: seq})
    with torch.no_grad():
        exported = torch.export.export(wrapper, example(max_len // 2), dynamic_shapes=dyn)
        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
        prepared = prepare_pt2e(exported.module(), quantizer)
        for i in range(calibration):
            prepared(*example(max(2, max_len >> (i % 3))))
        converted = convert_pt2e(prepared)
        final = torch.export.export(converted, example(max_len // 2), dynamic_shapes=dyn)
    # The same reshape pass palkit's own programs get, so the peer is not slowed by portable
    # view_copy ops that palkit's export avoids.
    program = to_edge_transform_and_lower(final, transform_passes=[infer_sequence_size],
                                          partitioner=[XnnpackPartitioner()]).to_executorch(
        ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.name}.int8.pte"
    path.write_bytes(program.buffer)
    return {"format": "pte", "path": str(path), "inputs": "mask4d"}


BUILDERS = {"ort-int8": build_ort_int8, "et-int8": build_et_int8}
