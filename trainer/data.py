"""Read a task's files, validate them, tokenize once, batch with dynamic padding.

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
from palkit.runtime.labels import first_pieces, is_bio_tag
from palkit.trainer.tasks import DELIMITERS, TaskSpec


@dataclass
class Example:
    texts: tuple[str, ...]
    # class index (classification), score (regression), the label names (multi_label) or one
    # tag per word (token_tagging)
    label: float | tuple[str, ...]


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
        reader = csv.reader(f, delimiter=DELIMITERS[task.delimiter],
                            quoting=csv.QUOTE_NONE if task.quoting == "none" else csv.QUOTE_MINIMAL)
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: file is empty")
        columns = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in (*task.text_columns, task.label_column) if c not in columns]
        if missing:
            raise DataError(f"{path}:1: missing column(s) {missing}; header has {list(columns)}")
        while True:
            first_line = reader.line_num + 1
            try:
                row = next(reader, None)
            except csv.Error as e:   # e.g. an unclosed quote ran a field past the size limit
                raise DataError(f"{path}:{reader.line_num}: {e} (quoting '{task.quoting}'; "
                                "a task whose text holds '\"' sets \"quoting\": \"none\")") from None
            if row is None:
                break
            if not row:
                continue
            try:
                if reader.line_num > first_line:   # a quote opened a field that ran on
                    raise DataError(f"{path}:{first_line}: a field opened by '\"' runs over "
                                    f"lines {first_line}-{reader.line_num}; a task whose text "
                                    "holds quotes sets \"quoting\": \"none\"")
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
    raw = row[columns[task.label_column]]
    if task.is_tagging:
        return Example(texts, _parse_tags(task, texts[0], raw, where))
    if task.is_multi_label:
        return Example(texts, _parse_label_set(task, raw, where))
    return Example(texts, _parse_label(task, raw, where))


def _parse_tags(task: TaskSpec, words: str, raw: str, where: str) -> tuple[str, ...]:
    tags = tuple(raw.split())
    n_words = len(words.split())
    if len(tags) != n_words:
        raise DataError(f"{where}: {len(tags)} tags in column '{task.label_column}' for "
                        f"{n_words} words in '{task.text_columns[0]}'; give one tag per word")
    bad = next((tag for tag in tags if not is_bio_tag(tag)), None)
    if bad is not None:
        raise DataError(f"{where}: tag '{bad}' in column '{task.label_column}' is not BIO "
                        "('O', 'B-type' or 'I-type')")
    return tags


def _parse_label_set(task: TaskSpec, raw: str, where: str) -> tuple[str, ...]:
    labels = tuple(dict.fromkeys(x.strip() for x in raw.split(task.label_separator) if x.strip()))
    if not labels:
        raise DataError(f"{where}: no label in column '{task.label_column}' (labels joined by "
                        f"'{task.label_separator}')")
    return labels


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


# Token targets that carry no loss: a word's later pieces, special tokens, padding.
IGNORED = -100


@dataclass
class EncodedSplit:
    """A tokenized split: ragged token lists, padded per batch by `collate`.

    `labels` is what training reads: [examples] class indices or scores; [examples, labels]
    0/1 for multi_label; [examples, max_len] tag indices at each word's first piece and IGNORED
    elsewhere for token_tagging. Those two kinds are scored on `gold` (label names or tags as
    the file gives them, unseen ones included); `first_pieces` holds each word's first token
    position (words past the maximum length have none)."""
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: torch.Tensor
    gold: list[tuple[str, ...]] | None = None
    first_pieces: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def per_token(self) -> bool:
        return self.first_pieces is not None


def encode(task: TaskSpec, examples: list[Example], tokenizer, max_len: int) -> EncodedSplit:
    """Tokenize once; pairs become one sequence [CLS] a [SEP] b [SEP]; a tagging task's words
    are tokenized as given (whitespace-separated) and each word's first piece carries its tag."""
    if task.is_tagging:
        return _encode_tagged(task, examples, tokenizer, max_len)
    firsts = [e.texts[0] for e in examples]
    seconds = [e.texts[1] for e in examples] if len(examples[0].texts) == 2 else None
    enc = tokenizer(firsts, seconds, truncation="longest_first", max_length=max_len,
                    return_token_type_ids=True)
    if not task.is_multi_label:
        labels = torch.tensor([e.label for e in examples], dtype=torch.float32)
        return EncodedSplit(enc["input_ids"], enc["token_type_ids"], labels)
    gold = [e.label for e in examples]
    index = {name: i for i, name in enumerate(task.labels or ())}
    labels = torch.zeros((len(examples), len(index)), dtype=torch.float32)
    for row, names in enumerate(gold):
        labels[row, [index[n] for n in names if n in index]] = 1.0
    _say_unseen(task, gold, index)
    return EncodedSplit(enc["input_ids"], enc["token_type_ids"], labels, gold=gold)


def _encode_tagged(task: TaskSpec, examples: list[Example], tokenizer,
                   max_len: int) -> EncodedSplit:
    words = [e.texts[0].split() for e in examples]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_len,
                    return_token_type_ids=True)
    gold = [e.label for e in examples]
    index = {tag: i for i, tag in enumerate(task.labels or ())}
    labels = torch.full((len(examples), max_len), IGNORED, dtype=torch.float32)
    firsts_of, cut, cut_rows = [], 0, 0
    for row, tags in enumerate(gold):
        firsts = first_pieces(enc.word_ids(row))
        firsts_of.append(firsts)
        for position, tag in zip(firsts, tags):
            if position >= 0:
                labels[row, position] = index.get(tag, IGNORED)
        if len(firsts) < len(tags):
            cut, cut_rows = cut + len(tags) - len(firsts), cut_rows + 1
    if cut:
        print(f"note: task '{task.name}': {cut} words in {cut_rows} texts lie past max length "
              f"{max_len}; they are not read and their gold spans count as missed",
              file=sys.stderr)
    _say_unseen(task, gold, index)
    return EncodedSplit(enc["input_ids"], enc["token_type_ids"], labels, gold=gold,
                        first_pieces=firsts_of)


def _say_unseen(task: TaskSpec, gold: list[tuple[str, ...]], index: dict[str, int]) -> None:
    """Labels the train split never had are scored as errors, never a crash: say which."""
    unseen: dict[str, int] = {}
    for names in gold:
        for name in names:
            if name not in index:
                unseen[name] = unseen.get(name, 0) + 1
    if unseen:
        shown = ", ".join(f"{n} x{c}" for n, c in sorted(unseen.items())[:5])
        more = f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""
        n = sum(unseen.values())
        print(f"note: task '{task.name}': {n} gold label{'s' if n > 1 else ''} the train split "
              f"never had ({shown}{more}); scored as errors", file=sys.stderr)


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
    labels = split.labels[indices]
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "labels": labels[:, :width] if split.per_token else labels}


@dataclass(frozen=True)
class TrainingSplit:
    """A task's encoded training split held once as padded tensors on the training device, so
    that a step's batch is gathered there by index (only the indices travel), equal to what
    `collate` builds from them. The lengths are also on the host, so that a batch's width is
    known without waiting for the device."""
    input_ids: torch.Tensor        # [examples, columns], pad id after each row's tokens
    token_type_ids: torch.Tensor   # [examples, columns], 0 after each row's tokens
    lengths: torch.Tensor          # [examples] tokens per row
    labels: torch.Tensor           # [examples] or [examples, labels] or [examples, columns] float32
    per_token: bool                # labels has a column per token
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
        labels = split.labels
        if split.per_token:
            labels = torch.full((len(split), columns), IGNORED, dtype=labels.dtype)
            labels[:, :split.labels.shape[1]] = split.labels
        return cls(ids.to(device), types.to(device), lengths.to(device), labels.to(device),
                   split.per_token, lengths, torch.arange(columns, device=device))

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
                 "labels": torch.index_select(self.labels[:, :width] if self.per_token
                                              else self.labels, 0, at, out=into("labels"))}
        return batch if out is None else out
