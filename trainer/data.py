"""Read the tab-separated minBERT layout, validate it, tokenize once, batch with dynamic padding.

Two ways to batch an encoded split: `collate` pads a batch's ragged rows on the host (scoring,
and the reference the training batches are held to), and `TrainingSplit` holds a training split
padded once on the training device and gathers each step's batch there by index.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import torch

from palkit.core.errors import DataError
from palkit.trainer.tasks import TaskSpec


@dataclass
class Example:
    texts: tuple[str, ...]
    label: float  # class index for classification, score for regression


# Skipping tolerates a stray broken row (the shipped Quora train file has one); more than this
# fraction of bad rows means a wrong file or column mapping, and stops the run either way.
MAX_BAD_FRACTION = 0.01


def read_examples(task: TaskSpec, data_dir: Path, split: str,
                  bad_rows: str = "stop") -> list[Example]:
    """Parse one split of a task. A bad row (too few fields, empty text, bad label) stops with
    file, line and problem, or with bad_rows="skip" is reported on stderr and left out."""
    if split not in task.files:
        raise DataError(f"task '{task.name}' has no '{split}' split (it has: "
                        f"{', '.join(task.files) or 'none'})")
    path = data_dir / task.files[split]
    if not path.is_file():
        raise DataError(f"{path}: file not found (task '{task.name}', split '{split}'); "
                        "check --data-dir")
    examples, skipped = [], []
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") would otherwise stick to the first column
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: file is empty")
        columns = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in (*task.text_columns, task.label_column) if c not in columns]
        if missing:
            raise DataError(f"{path}:1: missing column(s) {missing}; header has {list(columns)}")
        for row in reader:
            if not row:
                continue
            try:
                examples.append(_parse_row(task, row, columns, len(header), f"{path}:{reader.line_num}"))
            except DataError as e:
                if bad_rows != "skip":
                    raise
                skipped.append(str(e))
    if not examples:
        raise DataError(f"{path}: no examples")
    for problem in skipped:
        print(f"warning: skipped {problem}", file=sys.stderr)
    if len(skipped) > MAX_BAD_FRACTION * (len(examples) + len(skipped)):
        raise DataError(f"{path}: {len(skipped)} bad rows (first: {skipped[0]}); is this the "
                        f"right file for task '{task.name}'?")
    return examples


def _parse_row(task: TaskSpec, row: list[str], columns: dict[str, int], width: int,
               where: str) -> Example:
    if len(row) < width:
        raise DataError(f"{where}: {len(row)} fields, expected {width}")
    texts = tuple(row[columns[c]].strip() for c in task.text_columns)
    for col, text in zip(task.text_columns, texts):
        if not text:
            raise DataError(f"{where}: empty text in column '{col}'")
    return Example(texts, _parse_label(task, row[columns[task.label_column]], where))


def _parse_label(task: TaskSpec, raw: str, where: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise DataError(f"{where}: label '{raw}' in column '{task.label_column}' "
                        "is not a number") from None
    if task.is_regression:
        low, high = task.score_range  # type: ignore[misc]
        if not low <= value <= high:
            raise DataError(f"{where}: score {value} outside [{low}, {high}]")
        return value
    if value != int(value) or not 0 <= value < task.num_outputs:
        raise DataError(f"{where}: label '{raw}' is not a class index 0..{task.num_outputs - 1}")
    return float(int(value))


@dataclass
class EncodedSplit:
    """A tokenized split: ragged token lists, padded per batch by `collate`."""
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.input_ids)


def encode(examples: list[Example], tokenizer, max_len: int) -> EncodedSplit:
    """Tokenize once; pairs become one sequence [CLS] a [SEP] b [SEP]."""
    firsts = [e.texts[0] for e in examples]
    seconds = [e.texts[1] for e in examples] if len(examples[0].texts) == 2 else None
    enc = tokenizer(firsts, seconds, truncation="longest_first", max_length=max_len,
                    return_token_type_ids=True)
    labels = torch.tensor([e.label for e in examples], dtype=torch.float32)
    return EncodedSplit(enc["input_ids"], enc["token_type_ids"], labels)


def collate(split: EncodedSplit, indices: list[int], pad_id: int,
            pad_multiple: int = 1) -> dict[str, torch.Tensor]:
    """Pad a batch to its own longest sequence (dynamic padding), rounded up to a multiple of
    `pad_multiple` (a compiled model then meets few shapes)."""
    longest = max(len(split.input_ids[i]) for i in indices)
    width = -(-longest // pad_multiple) * pad_multiple
    ids = torch.full((len(indices), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(indices), width), dtype=torch.long)
    mask = torch.zeros((len(indices), width), dtype=torch.long)
    for row, i in enumerate(indices):
        n = len(split.input_ids[i])
        ids[row, :n] = torch.tensor(split.input_ids[i])
        types[row, :n] = torch.tensor(split.token_type_ids[i])
        mask[row, :n] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "labels": split.labels[indices]}


@dataclass(frozen=True)
class TrainingSplit:
    """A task's encoded training split held once as padded tensors on the training device, so
    that a step's batch is gathered there by index (only the indices travel), equal to what
    `collate` builds from them. The lengths are also on the host, so that a batch's width is
    known without waiting for the device."""
    input_ids: torch.Tensor        # [examples, columns], pad id after each row's tokens
    token_type_ids: torch.Tensor   # [examples, columns], 0 after each row's tokens
    lengths: torch.Tensor          # [examples] tokens per row
    labels: torch.Tensor           # [examples] float32
    host_lengths: torch.Tensor     # `lengths` on the host
    positions: torch.Tensor        # 0..columns-1, for the attention mask

    @classmethod
    def hold(cls, split: EncodedSplit, pad_id: int, columns: int,
             device: torch.device) -> "TrainingSplit":
        """Pad every row to `columns` (at least the longest row) and move the split to `device`."""
        lengths = torch.tensor([len(row) for row in split.input_ids], dtype=torch.long)
        columns = max(columns, int(lengths.max()))
        filled = torch.arange(columns) < lengths[:, None]
        ids = torch.full((len(split), columns), pad_id, dtype=torch.long)
        types = torch.zeros((len(split), columns), dtype=torch.long)
        # Boolean-mask assignment fills row-major, the order of the flattened rows.
        ids[filled] = torch.tensor(list(chain.from_iterable(split.input_ids)), dtype=torch.long)
        types[filled] = torch.tensor(list(chain.from_iterable(split.token_type_ids)),
                                     dtype=torch.long)
        return cls(ids.to(device), types.to(device), lengths.to(device),
                   split.labels.to(device), lengths, torch.arange(columns, device=device))

    def width(self, indices: torch.Tensor, pad_multiple: int = 1) -> int:
        """The batch's longest row, rounded up to a multiple of `pad_multiple` (as `collate`)."""
        longest = int(self.host_lengths.index_select(0, indices).max())
        return -(-longest // pad_multiple) * pad_multiple

    def gather(self, indices: torch.Tensor, width: int,
               out: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The rows `indices` (a host tensor) padded to `width`; with `out`, written into those
        tensors (a CUDA graph's inputs) and returned."""
        if self.lengths.is_cuda:   # pinned: the copy is queued, the host does not wait for it
            indices = indices.pin_memory()
        at = indices.to(self.lengths.device, non_blocking=True)
        into = out.get if out is not None else (lambda key: None)
        real = torch.lt(self.positions[:width], self.lengths.index_select(0, at)[:, None],
                        out=into("attention_mask"))
        batch = {"input_ids": torch.index_select(self.input_ids[:, :width], 0, at,
                                                 out=into("input_ids")),
                 "token_type_ids": torch.index_select(self.token_type_ids[:, :width], 0, at,
                                                      out=into("token_type_ids")),
                 "attention_mask": real if out is not None else real.long(),
                 "labels": torch.index_select(self.labels, 0, at, out=into("labels"))}
        return batch if out is None else out
