"""The PAL-BERT model: exact equivalence to BERT, task isolation, shapes, parameter budget."""
from __future__ import annotations

import torch
from transformers import BertConfig, BertModel

from palkit.core.errors import ConfigError
from palkit.trainer.model import PalBert, PalConfig, TaskAdapter, additive_mask, default_pal_size
from palkit.trainer.placement import pal_layer_indices
from palkit.trainer.tasks import BUILTIN_TASKS

TASKS = [BUILTIN_TASKS["sst"], BUILTIN_TASKS["quora"], BUILTIN_TASKS["sts"]]


def tiny_trunk(layers: int = 4, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=layers,
                     num_attention_heads=4, intermediate_size=64, attn_implementation="eager")
    return BertModel(cfg).eval()


def inputs(batch: int = 3, length: int = 9):
    torch.manual_seed(1)
    ids = torch.randint(1, 50, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 6:] = 0  # a padded row
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return ids, mask, types


def pal_model(layers: str = "all", share: bool = True, n_layers: int = 4) -> PalBert:
    trunk = tiny_trunk(n_layers)
    cfg = PalConfig(size=8, heads=2, layers=pal_layer_indices(n_layers, layers),
                    share_projections=share)
    return PalBert(trunk, TASKS, cfg).eval()


def test_zero_decoders_reproduce_plain_bert_exactly():
    model = pal_model()
    for adapter in model.adapters.values():
        for decoder in adapter.decoders:
            torch.nn.init.zeros_(decoder.weight)
            torch.nn.init.zeros_(decoder.bias)
    ids, mask, types = inputs()
    reference = model.trunk(input_ids=ids, attention_mask=mask, token_type_ids=types)
    h = model.embed(ids, types)
    am = additive_mask(mask, torch.float32)
    for i in range(4):
        h = model.layer(i, h, am, "sst")
    assert torch.equal(h, reference.last_hidden_state)
    assert torch.equal(model.trunk.pooler(h), reference.pooler_output)


def test_nonzero_pal_changes_the_output():
    model = pal_model()
    ids, mask, types = inputs()
    with torch.no_grad():
        with_pal = model(ids, mask, types, task="sst")
        model.adapters["sst"].decoders[0].weight.zero_()
        model.adapters["sst"].decoders[0].bias.zero_()
        without = model(ids, mask, types, task="sst")
    assert not torch.allclose(with_pal, without)


def test_pal_of_one_task_does_not_touch_another_task():
    model = pal_model()
    ids, mask, types = inputs()
    with torch.no_grad():
        before = {t: model(ids, mask, types, task=t) for t in ("quora", "sts")}
        for p in model.adapters["sst"].parameters():
            p.add_(torch.randn_like(p))
        for p in model.heads["sst"].parameters():
            p.add_(torch.randn_like(p))
        for t in ("quora", "sts"):
            assert torch.equal(model(ids, mask, types, task=t), before[t])


def test_task_gradients_stay_in_that_task():
    model = pal_model().train()
    ids, mask, types = inputs()
    model(ids, mask, types, task="quora").sum().backward()
    assert all(p.grad is None for p in model.adapters["sst"].parameters())
    assert all(p.grad is not None for p in model.adapters["quora"].parameters())


def test_forward_all_matches_per_task_forward():
    # forward_all batches the tasks (a padded row included); each slice must be that task alone.
    shared = PalBert(tiny_trunk(4), TASKS, None).eval()
    for model in (pal_model("all"), pal_model("top"), pal_model("bottom"), pal_model("top-1"),
                  pal_model("1,3"), shared):
        ids, mask, types = inputs()
        with torch.no_grad():
            together = model.forward_all(ids, mask, types)
            for t in ("sst", "quora", "sts"):
                assert torch.allclose(together[t], model(ids, mask, types, task=t), atol=1e-5)


def test_top_half_pals_leave_bottom_half_shared():
    model = pal_model("top")
    assert model.pal.layers == (2, 3) and model.first_adapted_layer("sst") == 2
    ids, mask, types = inputs()
    am = additive_mask(mask, torch.float32)
    with torch.no_grad():
        outs = []
        for t in ("sst", "quora"):
            h = model.embed(ids, types)
            for i in range(2):
                h = model.layer(i, h, am, t)
            outs.append(h)
    assert torch.equal(outs[0], outs[1])


def test_head_shapes_follow_task_kind():
    model = pal_model()
    ids, mask, types = inputs()
    with torch.no_grad():
        assert model(ids, mask, types, task="sst").shape == (3, 5)
        assert model(ids, mask, types, task="quora").shape == (3, 2)
        assert model(ids, mask, types, task="sts").shape == (3, 1)


def test_padding_does_not_change_a_row():
    model = pal_model()
    ids, mask, types = inputs()
    with torch.no_grad():
        full = model(ids, mask, types, task="sst")[1]
        alone = model(ids[1:2, :6], mask[1:2, :6], types[1:2, :6], task="sst")[0]
    assert torch.allclose(full, alone, atol=1e-5)


def test_default_pal_size_scales_the_paper():
    assert default_pal_size(768, 12) == 204     # the paper's BERT-base setting
    assert default_pal_size(384, 12) == 108     # MiniLM: 102 rounded to a multiple of 12
    assert default_pal_size(32, 4) % 4 == 0


def test_parameter_count_matches_paper_formula():
    # Paper, Table 1: a task's PALs cost 2·d·d_s (shared V^E, V^D) + L·3·d_s² (Q, K, V), plus biases.
    d, ds, layers = 32, 8, 4
    adapter = TaskAdapter(d, PalConfig(ds, 2, tuple(range(layers)), True), 0.0)
    weights = 2 * d * ds + layers * 3 * ds * ds
    biases = ds + d + layers * 3 * ds
    assert sum(p.numel() for p in adapter.parameters()) == weights + biases
    per_layer = TaskAdapter(d, PalConfig(ds, 2, tuple(range(layers)), False), 0.0)
    assert sum(p.numel() for p in per_layer.parameters()) == layers * (2 * d * ds + ds + d) + \
        layers * (3 * ds * ds + 3 * ds)


def test_param_counts_split_trunk_and_tasks():
    model = pal_model()
    counts = model.param_counts()
    assert counts["params_trunk"] == sum(p.numel() for p in model.trunk.parameters())
    assert counts["params_total"] == sum(p.numel() for p in model.parameters())


def test_shared_mode_has_heads_only():
    model = PalBert(tiny_trunk(), TASKS, None)
    assert len(model.adapters) == 0 and set(model.heads) == {"sst", "quora", "sts"}
    assert model.first_adapted_layer("sst") == 4


def test_training_attention_is_the_fused_kernel_with_the_same_outputs_and_gradients():
    """Train mode runs PyTorch's fused attention, eval mode (evaluation, export) the written-out
    bmm form; with dropout off the two agree, padded rows included, and so do the gradients."""
    from palkit.trainer.model import multi_head_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 9, 8, requires_grad=True) for _ in range(3))
    _, mask, _ = inputs()
    am = additive_mask(mask, torch.float32)
    fused = multi_head_attention(q, k, v, 2, am, 0.0, training=True)
    written = multi_head_attention(q, k, v, 2, am, 0.0, training=False)
    assert fused.shape == written.shape == (3, 9, 8)
    assert torch.allclose(fused, written, atol=1e-6)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v)) for out in (fused, written)]
    for g_fused, g_written in zip(*grads):
        assert torch.allclose(g_fused, g_written, atol=1e-5)
    one_row = multi_head_attention(q[:1], k[:1], v[:1], 2, am[:1], 0.0, training=True)
    assert torch.allclose(one_row, written[:1], atol=1e-6)


def test_training_attention_drops_out_with_its_probability():
    from palkit.trainer.model import multi_head_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 16, 8) for _ in range(3))
    am = additive_mask(torch.ones(2, 16, dtype=torch.long), torch.float32)
    kept = multi_head_attention(q, k, v, 2, am, 0.0, training=True)
    dropped = multi_head_attention(q, k, v, 2, am, 0.5, training=True)
    assert not torch.allclose(kept, dropped)


def hybrid_model(n_layers: int = 4) -> PalBert:
    """sst and quora with PALs in every layer (the run's), sts a head only, cola PALs on top."""
    cola = BUILTIN_TASKS["sst"].__class__.from_dict({**BUILTIN_TASKS["sst"].to_dict(),
                                                     "name": "cola"})
    top = PalConfig(size=8, heads=2, layers=(n_layers - 1,), share_projections=True)
    model = pal_model("all", n_layers=n_layers)
    return PalBert(model.trunk, TASKS + [cola], model.pal, {"sts": None, "cola": top}).eval()


def test_hybrid_forward_all_matches_each_task_alone():
    model = hybrid_model()
    assert model.task_pal("sts") is None and model.task_pal("cola").layers == (3,)
    assert model.placement_groups(list(model.tasks)) == [["sst", "quora"], ["sts"], ["cola"]]
    ids, mask, types = inputs()
    with torch.no_grad():
        together = model.forward_all(ids, mask, types)
        assert list(together) == ["sst", "quora", "sts", "cola"]
        for t in model.tasks:
            assert torch.allclose(together[t], model(ids, mask, types, task=t), atol=1e-5)
        # one task of its placement (no batching over tasks): the same sums, bit for bit
        for t in ("sts", "cola"):
            assert torch.equal(together[t], model(ids, mask, types, task=t))
    # a head-only task reads the plain trunk: exactly BertModel's pooled output through its head
    reference = model.trunk(input_ids=ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        assert torch.equal(model(ids, mask, types, task="sts"),
                           model.heads["sts"](reference.pooler_output))


def test_hybrid_forward_all_without_head_only_tasks():
    # two placements, neither head-only: the plain trunk stops where the last one branches
    model = hybrid_model()
    model.tasks.pop("sts"), model.heads.pop("sts")
    ids, mask, types = inputs()
    with torch.no_grad():
        together = model.forward_all(ids, mask, types)
        for t in model.tasks:
            assert torch.allclose(together[t], model(ids, mask, types, task=t), atol=1e-5)


def test_pal_width_is_one_per_model():
    wide = PalConfig(size=12, heads=2, layers=(3,), share_projections=True)
    model = pal_model("all")
    try:
        PalBert(model.trunk, TASKS, model.pal, {"sts": wide})
    except ConfigError as e:
        assert "PAL width 12 with 2 heads differs" in str(e)
    else:
        raise AssertionError("a PAL of another width was accepted")
