"""PAL-BERT: a BERT trunk with Projected Attention Layers per task (Stickland & Murray, 2019).

The model runs transformers' `BertModel` weights layer by layer so that it can add each task's
PAL output (a small multi-head attention in a projected space) in parallel inside every layer:

    a       = LN1(h + SelfAttention(h))
    h_next  = LN2(a + FFN(a) + PAL_t(h))          PAL_t(h) = GELU(V^D · MH_t(V^E · h))

PAL_t reads the layer's input h and is added before the layer's output LayerNorm, as in the
authors' released code; the GELU on the decoder output is theirs too. With a zero V^D (weight and
bias) the PAL adds exactly 0 and the layer is plain BERT.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertModel
from transformers.activations import ACT2FN

from palkit.core.errors import ConfigError
from palkit.trainer.tasks import TaskSpec

# The paper's projected size for BERT-base: d_s = 204 for d = 768.
PAPER_PAL_RATIO = 204 / 768


@dataclass(frozen=True)
class PalConfig:
    size: int                   # d_s, the projected width
    heads: int                  # attention heads inside the PAL
    layers: tuple[int, ...]     # trunk layers that get a PAL
    share_projections: bool     # one V^E/V^D per task for all layers (paper) or one per layer

    def __post_init__(self) -> None:
        if self.size % self.heads:
            raise ConfigError(f"PAL size {self.size} is not divisible by {self.heads} heads")

    def to_dict(self) -> dict:
        return {**asdict(self), "layers": list(self.layers)}

    @classmethod
    def from_dict(cls, d: dict) -> "PalConfig":
        return cls(int(d["size"]), int(d["heads"]), tuple(d["layers"]), bool(d["share_projections"]))


def default_pal_size(hidden_size: int, heads: int) -> int:
    """Scale the paper's 204/768 to the trunk's width, rounded to a multiple of the head count."""
    per_head = math.floor(PAPER_PAL_RATIO * hidden_size / heads + 0.5)
    return heads * max(1, per_head)


def check_same_width(pal: PalConfig, others: list[PalConfig | None]) -> None:
    """One PAL width and head count per model: a bundle's PALs all have one shape per layer."""
    for other in others:
        if other is not None and (other.size, other.heads) != (pal.size, pal.heads):
            raise ConfigError(f"PAL width {pal.size} with {pal.heads} heads differs from the "
                              f"model's other PALs ({other.size} with {other.heads} heads); "
                              "train the task with the run's --pal-size and --pal-heads")


def copies(x: torch.Tensor, n: int) -> torch.Tensor:
    """n copies of a batch stacked (one: the batch itself, no op in an exported graph)."""
    return x if n == 1 else x.repeat(n, 1, 1)


def branch_mask(mask: torch.Tensor, n: int) -> torch.Tensor:
    """The mask for n stacked copies of a batch (a one-row mask broadcasts as it is)."""
    return mask if mask.shape[0] == 1 else mask.repeat(n, 1, 1, 1)


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, S] 1/0 mask -> [B, 1, 1, S] additive mask (0 where attended, very negative where not)."""
    keep = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - keep) * torch.finfo(dtype).min


def multi_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                         mask: torch.Tensor, dropout_p: float, training: bool) -> torch.Tensor:
    """Scaled dot-product attention. Training runs PyTorch's fused kernel (one call where the
    written-out form launches about eight). Evaluation and export run it written out as 3-D
    batched matrix multiplies over batch x heads, every reshape spelled with -1 for the sequence
    length: ExecuTorch's XNNPACK delegate takes reshapes with one inferred size but not a
    symbolic one, nor a 4-D matmul's expands, so in this form a layer's attention stays inside
    one delegate. A mask with one row broadcasts over the batch."""
    b, s, width = q.shape
    head_dim = width // heads
    scale = head_dim ** -0.5

    def split(x: torch.Tensor) -> torch.Tensor:  # [b, s, width] -> [b, heads, s, head_dim]
        return x.reshape(b, -1, heads, head_dim).transpose(1, 2)

    if training:
        ctx = F.scaled_dot_product_attention(split(q), split(k), split(v),
                                             attn_mask=mask.to(q.dtype), dropout_p=dropout_p,
                                             scale=scale)
        return ctx.transpose(1, 2).reshape(b, -1, width)
    # K^T made contiguous as transformers' 4-D matmul makes it: the same sums, bit for bit
    kt = split(k).transpose(2, 3).reshape(b * heads, head_dim, -1)
    scores = torch.bmm(split(q).reshape(b * heads, -1, head_dim), kt) * scale
    if mask.shape[0] == 1:
        scores = scores + mask.reshape(1, 1, -1)
    else:
        scores = (scores.view(b, heads, s, s) + mask).view(b * heads, s, s)
    ctx = torch.bmm(scores.softmax(dim=-1), split(v).reshape(b * heads, -1, head_dim))
    return ctx.reshape(b, heads, -1, head_dim).transpose(1, 2).reshape(b, -1, width)


class ProjectedAttention(nn.Module):
    """MH_t: multi-head self-attention inside the projected space, without an output matrix W^O."""

    def __init__(self, size: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.query = nn.Linear(size, size)
        self.key = nn.Linear(size, size)
        self.value = nn.Linear(size, size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return multi_head_attention(self.query(x), self.key(x), self.value(x), self.heads, mask,
                                    self.dropout, self.training)


class TaskAdapter(nn.Module):
    """All PALs of one task: an attention per adapted layer, V^E/V^D shared or per layer."""

    def __init__(self, hidden_size: int, cfg: PalConfig, dropout: float):
        super().__init__()
        self.cfg = cfg
        n_proj = 1 if cfg.share_projections else len(cfg.layers)
        self.encoders = nn.ModuleList(nn.Linear(hidden_size, cfg.size) for _ in range(n_proj))
        self.decoders = nn.ModuleList(nn.Linear(cfg.size, hidden_size) for _ in range(n_proj))
        self.attentions = nn.ModuleList(ProjectedAttention(cfg.size, cfg.heads, dropout)
                                        for _ in cfg.layers)
        self.slot_of_layer = {layer: slot for slot, layer in enumerate(cfg.layers)}

    def forward(self, layer: int, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        slot = self.slot_of_layer[layer]
        proj = 0 if self.cfg.share_projections else slot
        projected = self.attentions[slot](self.encoders[proj](h), mask)
        return F.gelu(self.decoders[proj](projected))


class TaskHead(nn.Module):
    """Dropout and a linear map to the task's outputs: from the pooled [CLS] state, or for a
    tagging task from every token's state (one row of tag scores per token)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_outputs)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(pooled))


def regression_score(spec: TaskSpec, raw: torch.Tensor) -> torch.Tensor:
    """The regression head predicts a logit; the score is that logit squashed into score_range."""
    low, high = spec.score_range  # type: ignore[misc]
    return low + (high - low) * torch.sigmoid(raw.squeeze(-1))


class PalBert(nn.Module):
    """A BERT trunk shared by all tasks, one adapter (optional) and one head per task.

    `pal` is the run's adapter, the one joint training gives every task; `task_pals` gives a
    task another (a PalConfig with its own layers, or None: a head only), as a task added later
    has. PAL width and heads are one per model."""

    def __init__(self, trunk: BertModel, tasks: list[TaskSpec], pal: PalConfig | None,
                 task_pals: dict[str, PalConfig | None] | None = None):
        super().__init__()
        cfg = trunk.config
        if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
            raise ConfigError("only BERT checkpoints with absolute position embeddings are supported")
        if trunk.pooler is None:
            raise ConfigError("the trunk was loaded without its pooler (add_pooling_layer=False)")
        self.trunk = trunk
        self.tasks = {t.name: t for t in tasks}
        self.pal = pal
        self.adapters = nn.ModuleDict()
        self.heads = nn.ModuleDict()
        for t in tasks:
            self.add_task_modules(t, (task_pals or {}).get(t.name, pal))

    def add_task_modules(self, spec: TaskSpec, pal: PalConfig | None) -> None:
        """A fresh adapter (unless `pal` is None: a head only) and head for `spec`."""
        cfg = self.trunk.config
        if pal is not None:
            check_same_width(pal, [a.cfg for a in self.adapters.values()] + [self.pal])
            adapter = TaskAdapter(cfg.hidden_size, pal, cfg.attention_probs_dropout_prob)
            adapter.apply(self._init_linear)
            self.adapters[spec.name] = adapter
        head = TaskHead(cfg.hidden_size, spec.num_outputs, cfg.hidden_dropout_prob)
        head.apply(self._init_linear)
        self.heads[spec.name] = head
        self.tasks[spec.name] = spec

    def task_pal(self, task: str) -> PalConfig | None:
        """The task's own adapter config; None for a head-only task."""
        return self.adapters[task].cfg if task in self.adapters else None

    def _init_linear(self, module: nn.Module) -> None:
        # BERT's own initialisation, as the paper's code uses for its PALs.
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.trunk.config.initializer_range)
            nn.init.zeros_(module.bias)

    # ---- forward -------------------------------------------------------------------------

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        emb = self.trunk.embeddings
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # Same summation order as transformers, so a zero PAL reproduces BertModel bit for bit.
        h = emb.word_embeddings(input_ids) + emb.token_type_embeddings(token_type_ids)
        h = h + emb.position_embeddings(positions)[None]
        return emb.dropout(emb.LayerNorm(h))

    def trunk_sublayers(self, index: int, h: torch.Tensor,
                        mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A BERT layer's two halves before its output LayerNorm: a = LN1(h + SA(h)), FFN(a)."""
        block = self.trunk.encoder.layer[index]
        attn = block.attention
        cfg = self.trunk.config
        q, k, v = attn.self.query(h), attn.self.key(h), attn.self.value(h)
        ctx = multi_head_attention(q, k, v, cfg.num_attention_heads, mask,
                                   cfg.attention_probs_dropout_prob, self.training)
        a = attn.output.LayerNorm(attn.output.dropout(attn.output.dense(ctx)) + h)
        ffn = block.output.dropout(block.output.dense(ACT2FN[cfg.hidden_act](
            block.intermediate.dense(a))))
        return a, ffn

    def layer(self, index: int, h: torch.Tensor, mask: torch.Tensor,
              task: str | list[str] | None) -> torch.Tensor:
        """One BERT layer, plus the task's PAL in parallel when this layer is adapted for it.
        `task` may list one task per equal slice of the batch, all of one placement
        (forward_all runs such a group as one batch)."""
        a, ffn = self.trunk_sublayers(index, h, mask)
        names = task if isinstance(task, list) else [task]
        pal = None if task is None else self.task_pal(names[0])
        if pal is not None and index in pal.layers:
            ffn = ffn + self.task_pals(index, h, mask, names, shared=False)
        return self.trunk.encoder.layer[index].output.LayerNorm(ffn + a)

    def task_pals(self, index: int, h: torch.Tensor, mask: torch.Tensor, tasks: list[str],
                  shared: bool) -> torch.Tensor:
        """Every task's PAL output in layer `index`, as one batch (slice t is task t). `h` and
        `mask` hold one equal slice per task, or (`shared`) one slice that every task reads; a
        one-row mask serves every row."""
        n = len(tasks)
        hs = [h] * n if shared else h.chunk(n)
        masks = mask.chunk(n) if not shared and mask.shape[0] > 1 else [mask] * n
        return torch.cat([self.adapters[t](index, x, m) for t, x, m in zip(tasks, hs, masks)])

    def first_adapted_layer(self, task: str) -> int:
        """Layers below this one are the plain trunk for `task` (the layer count: a head only)."""
        pal = self.task_pal(task)
        return len(self.trunk.encoder.layer) if pal is None else min(pal.layers)

    def placement_groups(self, tasks: list[str]) -> list[list[str]]:
        """`tasks` grouped by PAL placement (the same adapted layers; head-only tasks are one
        group), groups in order of first appearance: a group runs as one batch."""
        groups: dict[tuple[int, ...], list[str]] = {}
        for t in tasks:
            pal = self.task_pal(t)
            groups.setdefault(pal.layers if pal else (), []).append(t)
        return list(groups.values())

    def branched(self, h: torch.Tensor, mask: torch.Tensor,
                 branches: list[tuple[int, str | list[str] | None, int]]) -> list[torch.Tensor]:
        """The encoder for several branches on one embedded input, the trunk run once up to the
        highest branch point. A branch is (its first adapted layer, its `task` argument to
        layer(), its row count n): below that layer, and for that layer's attention and
        feed-forward, it reads the plain trunk, so only its PALs and join run per branch
        ([n·B, S, d], slice t is task t); a head-only branch (first layer = the layer count)
        reads the plain trunk's output. Same sums in the same order as forward()."""
        layers = len(self.trunk.encoder.layer)
        split = max(first for first, _, _ in branches)
        states: dict[int, torch.Tensor] = {}
        for i in range(layers):
            for b, (first, task, n) in enumerate(branches):
                if first < i:
                    states[b] = self.layer(i, states[b], branch_mask(mask, n), task)
            if i > split:
                continue
            a, ffn = self.trunk_sublayers(i, h, mask)
            for b, (first, task, n) in enumerate(branches):
                if first == i:
                    # a task list: each task's PAL on the shared state; a slot (export): its
                    # PAL with n stacked weights, so on n copies of the state
                    pals = (self.task_pals(i, h, mask, task, shared=True)
                            if isinstance(task, list) else
                            self.adapters[task](i, copies(h, n), mask))
                    joined = (copies(ffn, n) + pals) + copies(a, n)
                    states[b] = self.trunk.encoder.layer[i].output.LayerNorm(joined)
            if i < split:
                h = self.trunk.encoder.layer[i].output.LayerNorm(ffn + a)
        return [states.get(b, h) for b in range(len(branches))]

    def head(self, task: str, h: torch.Tensor) -> torch.Tensor:
        if self.tasks[task].is_tagging:
            return self.heads[task](h)
        return self.heads[task](self.trunk.pooler(h))

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor, task: str) -> torch.Tensor:
        """The last layer's states [B, S, d] for `task`: only the task's own PALs run."""
        mask = additive_mask(attention_mask, self.trunk.embeddings.word_embeddings.weight.dtype)
        h = self.embed(input_ids, token_type_ids)
        for i in range(len(self.trunk.encoder.layer)):
            h = self.layer(i, h, mask, task)
        return h

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor, task: str) -> torch.Tensor:
        """Raw outputs of one task: class or label logits [B, labels], the regression logit
        [B, 1] (see regression_score), or tag logits [B, S, tags]."""
        return self.head(task, self.encode(input_ids, attention_mask, token_type_ids, task))

    def forward_all(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every task on one input. The trunk runs once up to the highest layer where a
        placement's PALs begin (`branched`); head-only tasks read its plain output, and the
        tasks of one placement run as one batch from their first adapted layer on, so the
        trunk's weights are read once per layer and its matrix multiplies get more rows."""
        mask = additive_mask(attention_mask, self.trunk.embeddings.word_embeddings.weight.dtype)
        h = self.embed(input_ids, token_type_ids)
        groups = self.placement_groups(list(self.tasks))
        states = self.branched(h, mask, [(self.first_adapted_layer(g[0]), g, len(g))
                                         for g in groups])
        out: dict[str, torch.Tensor] = {}
        for group, state in zip(groups, states):
            n = len(group)  # a head-only group shares the plain state
            slices = state.chunk(n) if state.shape[0] != h.shape[0] else [state] * n
            out.update({t: self.head(t, x) for t, x in zip(group, slices)})
        return {t: out[t] for t in self.tasks}

    # ---- bookkeeping ---------------------------------------------------------------------

    def task_modules(self, task: str) -> dict[str, nn.Module]:
        """A task's own modules, by the prefix their weights are saved under: "head", and "pal"
        when the model has PALs. The one definition of a task's parameter names."""
        modules: dict[str, nn.Module] = {"head": self.heads[task]}
        if task in self.adapters:
            modules["pal"] = self.adapters[task]
        return modules

    def task_parameters(self, task: str) -> dict[str, nn.Parameter]:
        """The task-specific weights, keyed as they are saved in the task's adapter file."""
        return {f"{prefix}.{k}": v for prefix, module in self.task_modules(task).items()
                for k, v in module.named_parameters()}

    def param_counts(self) -> dict[str, int]:
        trunk = sum(p.numel() for p in self.trunk.parameters())
        specific = sum(p.numel() for t in self.tasks for p in self.task_parameters(t).values())
        return {"params_trunk": trunk, "params_task_specific": specific,
                "params_total": trunk + specific}
