"""PAL-BERT: a BERT trunk with Projected Attention Layers per task (Stickland & Murray, 2019).

Read top to bottom: the PAL (a small multi-head attention in a projected space), one task's
adapter (the PALs of every adapted layer, V^E/V^D shared across layers as in the paper), a
task head, and the model that runs transformers' `BertModel` weights layer by layer so that it
can add each task's PAL output in parallel inside every layer:

    a       = LN1(h + SelfAttention(h))
    h_next  = LN2(a + FFN(a) + PAL_t(h))          PAL_t(h) = GELU(V^D · MH_t(V^E · h))

PAL_t reads the layer's input h and is added before the layer's output LayerNorm, as in the
authors' released code; the GELU on the decoder output is theirs too. With a zero V^D (weight and
bias) the PAL adds exactly 0 and the layer is plain BERT.

The same module is used by training, export and tests.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertModel
from transformers.activations import ACT2FN

from trainer.errors import ConfigError
from trainer.tasks import TaskSpec

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
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PalConfig":
        return cls(int(d["size"]), int(d["heads"]), tuple(d["layers"]), bool(d["share_projections"]))


def default_pal_size(hidden_size: int, heads: int) -> int:
    """Scale the paper's 204/768 to the trunk's width, rounded to a multiple of the head count."""
    per_head = math.floor(PAPER_PAL_RATIO * hidden_size / heads + 0.5)
    return heads * max(1, per_head)


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, S] 1/0 mask -> [B, 1, 1, S] additive mask (0 where attended, very negative where not)."""
    keep = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - keep) * torch.finfo(dtype).min


def multi_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                         mask: torch.Tensor, dropout_p: float, training: bool) -> torch.Tensor:
    """Scaled dot-product attention. Training runs PyTorch's fused kernel (flash or
    memory-efficient on a GPU, one fused loop on a CPU: one call where the written-out form
    launches about eight). Evaluation and export run it written out as 3-D batched matrix
    multiplies over batch x heads, every reshape spelled with -1 for the sequence length:
    ExecuTorch's XNNPACK delegate takes reshapes with one inferred size but not a symbolic one,
    nor a 4-D matmul's expands, so in this form a layer's attention stays inside one delegate.
    A mask with one row broadcasts over the batch."""
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
    """Dropout and a linear map from the pooled [CLS] state to the task's outputs."""

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
    """A BERT trunk shared by all tasks, one adapter (optional) and one head per task."""

    def __init__(self, trunk: BertModel, tasks: list[TaskSpec], pal: PalConfig | None):
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
            self.add_task_modules(t)

    def add_task_modules(self, spec: TaskSpec) -> None:
        """A fresh adapter (when PALs are on) and head; joint training and add-task both use it."""
        cfg = self.trunk.config
        if self.pal is not None:
            adapter = TaskAdapter(cfg.hidden_size, self.pal, cfg.attention_probs_dropout_prob)
            adapter.apply(self._init_linear)
            self.adapters[spec.name] = adapter
        head = TaskHead(cfg.hidden_size, spec.num_outputs, cfg.hidden_dropout_prob)
        head.apply(self._init_linear)
        self.heads[spec.name] = head
        self.tasks[spec.name] = spec

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
        """One BERT layer, plus the task's PAL in parallel when this layer is adapted. `task` may
        list one task per equal slice of the batch (forward_all runs every task as one batch)."""
        a, ffn = self.trunk_sublayers(index, h, mask)
        if task is not None and self.adapted(index):
            if isinstance(task, list):
                ffn = ffn + self.task_pals(index, h, mask, task, shared=False)
            elif task in self.adapters:
                ffn = ffn + self.adapters[task](index, h, mask)
        return self.trunk.encoder.layer[index].output.LayerNorm(ffn + a)

    def fork_layer(self, index: int, h: torch.Tensor, mask: torch.Tensor,
                   tasks: list[str]) -> torch.Tensor:
        """The first adapted layer for every task at once: its input is the same for all tasks,
        so attention and feed-forward run once and only the PALs and the join run per task.
        Returns the tasks' states as one batch (slice t is task t)."""
        a, ffn = self.trunk_sublayers(index, h, mask)
        n = len(tasks)
        pals = self.task_pals(index, h, mask, tasks, shared=True)
        # Same order of additions as layer(), so each slice equals the task run alone.
        joined = (ffn.repeat(n, 1, 1) + pals) + a.repeat(n, 1, 1)
        return self.trunk.encoder.layer[index].output.LayerNorm(joined)

    def task_pals(self, index: int, h: torch.Tensor, mask: torch.Tensor, tasks: list[str],
                  shared: bool) -> torch.Tensor:
        """Every task's PAL output in layer `index`, as one batch (slice t is task t). `h` and
        `mask` hold one equal slice per task, or (`shared`) one slice that every task reads; a
        one-row mask serves every row."""
        n = len(tasks)
        hs = [h] * n if shared else h.chunk(n)
        masks = mask.chunk(n) if not shared and mask.shape[0] > 1 else [mask] * n
        return torch.cat([self.adapters[t](index, x, m) for t, x, m in zip(tasks, hs, masks)])

    def adapted(self, index: int) -> bool:
        return self.pal is not None and index in self.pal.layers

    def first_adapted_layer(self) -> int:
        """Layers below this one are identical for every task and can be computed once."""
        if self.pal is None:
            return len(self.trunk.encoder.layer)
        return min(self.pal.layers)

    def head(self, task: str, h: torch.Tensor) -> torch.Tensor:
        return self.heads[task](self.trunk.pooler(h))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor, task: str) -> torch.Tensor:
        """Raw outputs of one task: class logits, or the regression logit (see regression_score)."""
        mask = additive_mask(attention_mask, self.trunk.embeddings.word_embeddings.weight.dtype)
        h = self.embed(input_ids, token_type_ids)
        for i in range(len(self.trunk.encoder.layer)):
            h = self.layer(i, h, mask, task)
        return self.head(task, h)

    def forward_all(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every task on one input. The layers below the first PAL, and that layer's attention and
        feed-forward, run once for all tasks; above it the tasks run as one batch (slice t is
        task t), so the trunk's weights are read once per layer and its matrix multiplies get T
        times the rows."""
        mask = additive_mask(attention_mask, self.trunk.embeddings.word_embeddings.weight.dtype)
        h = self.embed(input_ids, token_type_ids)
        split_at = self.first_adapted_layer()
        for i in range(split_at):
            h = self.layer(i, h, mask, None)
        names = list(self.tasks)
        if split_at == len(self.trunk.encoder.layer):  # no PALs: every task reads the same state
            return {t: self.head(t, h) for t in names}
        h = self.fork_layer(split_at, h, mask, names)
        if mask.shape[0] > 1:  # a one-row mask broadcasts over the tasks' rows as it is
            mask = mask.repeat(len(names), 1, 1, 1)
        for i in range(split_at + 1, len(self.trunk.encoder.layer)):
            h = self.layer(i, h, mask, names)
        return {t: self.head(t, x) for t, x in zip(names, h.chunk(len(names)))}

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
