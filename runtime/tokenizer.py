"""The bundle's tokenizer on the host: BERT WordPiece from vocab.txt and the manifest's
settings, with the refusals a user can fix (empty text, text that is not UTF-8).

Built on the `tokenizers` library directly, the same pipeline transformers' BertTokenizerFast
assembles (tests/test_tokenizer_property.py holds the two equal on arbitrary text), so running a
bundle never imports transformers (about a second of start-up)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from palkit.runtime.labels import first_pieces
from palkit.runtime.manifest import BundleError, TokenizerSettings


def wordpiece(settings: TokenizerSettings, vocab: Path) -> Any:
    """BertTokenizerFast's pipeline: BERT normalizer and pre-tokenizer, WordPiece, then
    `[CLS] a [SEP]` / `[CLS] a [SEP] b [SEP]` with token types 0 then 1; the special tokens are
    matched whole in the text, as transformers adds them."""
    from tokenizers import Tokenizer as WordPieceTokenizer
    from tokenizers import normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    ids = WordPiece.read_file(str(vocab))
    for token in (settings.cls_token, settings.sep_token, settings.unk_token):
        if token not in ids:
            raise BundleError(f"{vocab}: has no '{token}' token; re-export the bundle")
    tok = WordPieceTokenizer(WordPiece(ids, unk_token=settings.unk_token,
                                       max_input_chars_per_word=settings.max_input_chars_per_word))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=bool(settings.strip_accents),
        lowercase=bool(settings.lowercase))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.BertProcessing(
        (settings.sep_token, ids[settings.sep_token]), (settings.cls_token, ids[settings.cls_token]))
    tok.add_special_tokens([t for t in (settings.pad_token, settings.unk_token, settings.cls_token,
                                        settings.sep_token, settings.mask_token) if t in ids])
    return tok


@dataclass(frozen=True)
class Words:
    """A text's model inputs (each [1, seq] int64), its words and each word's first token
    position (words past the maximum length have none)."""
    ids: np.ndarray
    mask: np.ndarray
    types: np.ndarray
    words: list[str]
    first_pieces: list[int]


class Tokenizer:
    def __init__(self, settings: TokenizerSettings, vocab: Path):
        self.max_length = int(settings.max_length)
        self.full = wordpiece(settings, vocab)
        self.tok = wordpiece(settings, vocab)
        self.tok.enable_truncation(self.max_length, strategy="longest_first")

    def __call__(self, text: str, pair: str | None = None,
                 warn: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token_type_ids), each [1, seq] int64."""
        for label, s in (("text", text), ("second text", pair)):
            if s is not None:
                check_text(label, s)
        return self._arrays(self.full.encode(text, pair), self.tok.encode(text, pair), warn)

    def words(self, text: str, warn: bool = True) -> "Words":
        """One text as a tagging task reads it: its whitespace-separated words, tokenized as
        given (the same pieces as the plain text gets), with each word's first piece."""
        check_text("text", text)
        words = text.split()
        enc = self.tok.encode(words, is_pretokenized=True)
        ids, mask, types = self._arrays(self.full.encode(words, is_pretokenized=True), enc, warn)
        return Words(ids, mask, types, words, first_pieces(enc.word_ids))

    def _arrays(self, full: Any, enc: Any, warn: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        full = len(full.ids)
        if len(enc.ids) > self.max_length:  # too short for [CLS] a [SEP] b [SEP]
            raise BundleError(f"max_length {self.max_length} cannot hold two texts; re-export "
                              "with --max-len 3 or more")
        if warn and full > self.max_length:
            print(f"warning: input is {full} tokens; truncated to the bundle's max length "
                  f"{self.max_length}", file=sys.stderr)
        ids = np.asarray([enc.ids], dtype=np.int64)
        return ids, np.ones_like(ids), np.asarray([enc.type_ids], dtype=np.int64)


def check_text(label: str, s: str) -> None:
    if not isinstance(s, str) or not s.strip():
        raise BundleError(f"the {label} is empty; give some words to classify")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:  # undecodable bytes arrive as lone surrogates
        raise BundleError(f"the {label} is not valid UTF-8 (at character {e.start}); pass "
                          "UTF-8 text") from None
