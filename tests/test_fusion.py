"""fuse_for_inference (export-time fusion): the fused copy computes what the model computes.

Query/key/value as one Linear (trunk and PALs), V^E composed into the PALs' (fold_encoder), the
scores' scale folded into the queries (prescale_query), and the tasks' adapters stacked into
batched matrix multiplies for forward_all; for any placement and
with V^E/V^D shared or per layer. And an exported bundle (attention as 3-D bmm, reshapes given
-1 for the sequence length) still passes export's verification with attention delegated.
"""
from __future__ import annotations

import pytest
import torch
from test_model import TASKS, inputs, pal_model

from trainer.model import StackedLinear, fuse_for_inference

TOL = dict(atol=2e-5, rtol=1e-4)


def randomize(model):
    """Nonzero PALs (a fresh model's are small but not zero; make them matter)."""
    torch.manual_seed(3)
    with torch.no_grad():
        for adapter in model.adapters.values():
            for p in adapter.parameters():
                p.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("layers, share", [("all", True), ("top-1", True), ("0,2", True),
                                           ("0,2", False)])
@pytest.mark.parametrize("fold, prescale", [(False, False), (True, False), (False, True),
                                            (True, True)])
def test_fused_equals_unfused_one_task_and_all_tasks(layers, share, fold, prescale):
    model = randomize(pal_model(layers, share))
    fused = fuse_for_inference(model, fold=fold, prescale=prescale)
    ids, mask, types = inputs()
    with torch.no_grad():
        every = fused.forward_all(ids, mask, types)
        reference = model.forward_all(ids, mask, types)
        for t in TASKS:
            alone = model(ids, mask, types, t.name)
            torch.testing.assert_close(fused(ids, mask, types, t.name), alone, **TOL)
            torch.testing.assert_close(every[t.name], alone, **TOL)
            torch.testing.assert_close(reference[t.name], alone, **TOL)


def test_fusion_leaves_the_model_and_its_parameter_names_alone():
    model = pal_model()
    names = list(model.state_dict())
    fused = fuse_for_inference(model, fold=True)
    assert list(model.state_dict()) == names
    attn = fused.trunk.encoder.layer[0].attention.self
    assert attn.qkv.weight.shape == (3 * 32, 32) and not hasattr(attn, "query")
    pal = fused.adapters["sst"].attentions[0]
    assert pal.qkv.weight.shape == (3 * 8, 32)  # folded: d -> 3 d_s
    assert isinstance(fused.stacked.decoders[0], StackedLinear)
    assert fused.stacked.decoders[0].weight.shape == (len(TASKS), 8, 32)


def test_stacked_adapters_are_used_only_for_their_own_task_order():
    model = randomize(pal_model())
    fused = fuse_for_inference(model)
    ids, mask, types = inputs()
    reordered = list(reversed(fused.stacked_tasks))
    fused.tasks = {t: fused.tasks[t] for t in reordered}  # falls back to one task at a time
    with torch.no_grad():
        every = fused.forward_all(ids, mask, types)
        for t in reordered:
            torch.testing.assert_close(every[t], model(ids, mask, types, t), **TOL)


def test_exported_bundle_verifies_with_attention_inside_the_delegate(et_fp32):
    """Export's own verification (each task program and the all-tasks program against the
    PyTorch model) passed, and no reshape or expand of attention was left to a portable kernel
    (multi_head_attention's 3-D form and export's infer_sequence_size pass)."""
    import json

    from export.manifest import read_manifest

    report = json.loads((et_fp32 / "verify.json").read_text())
    assert report["passed"], report["failures"]
    et = report["runtimes"]["executorch"]
    for records in (et["tasks"], et["all_tasks_program"]["tasks"]):
        assert records and all(r["max_abs_diff"] < 1e-4 for r in records.values())
    ops = read_manifest(et_fp32).runtimes["executorch"].non_delegated_ops
    assert ops and not [op for op in ops if "view_copy" in op or "expand_copy" in op], ops


def test_prescaled_queries_carry_the_scale_and_the_scores_skip_it():
    model = pal_model()
    fused = fuse_for_inference(model, qkv=False, stack=False, prescale=True)
    trunk_q = model.trunk.encoder.layer[0].attention.self.query
    fused_attn = fused.trunk.encoder.layer[0].attention.self
    assert torch.equal(fused_attn.query.weight, trunk_q.weight * (32 // 4) ** -0.5)
    assert fused_attn.score_scale == 1.0
    pal = fused.adapters["sst"].attentions[0]
    reference = model.adapters["sst"].attentions[0]
    assert torch.equal(pal.query.bias, reference.query.bias * (8 // 2) ** -0.5)
    assert not hasattr(reference, "score_scale")       # the trained model is left alone


def test_custom_sdpa_variant_computes_the_written_out_attention():
    """bench/compute_sharing.py's `-customsdpa` variant (measured slower, not used by export)."""
    import trainer.model as model_code
    from bench.compute_sharing import custom_sdpa, custom_sdpa_attention
    from trainer.model import additive_mask, multi_head_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 9, 8) for _ in range(3))
    mask = additive_mask(torch.tensor([[1] * 7 + [0] * 2]), torch.float32)
    with custom_sdpa():
        assert model_code.multi_head_attention is custom_sdpa_attention
        fused = custom_sdpa_attention(q, k, v, 2, mask, 0.0, False)
    assert model_code.multi_head_attention is multi_head_attention      # put back
    torch.testing.assert_close(fused, multi_head_attention(q, k, v, 2, mask, 0.0, False), **TOL)
