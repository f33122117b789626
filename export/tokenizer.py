"""The bundle's tokenizer on the host: HF's fast BERT tokenizer built from vocab.txt and the
manifest's settings, with the refusals a user can fix (empty text, text that is not UTF-8)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from export.manifest import BundleError, TokenizerSettings
from ui.progress import say


class Tokenizer:
    def __init__(self, settings: TokenizerSettings, vocab: Path):
        from transformers import BertTokenizerFast

        self.max_length = int(settings.max_length)
        # transformers 5 takes the vocabulary as `vocab`; `vocab_file` is silently ignored
        # there (it builds a vocabulary of special tokens only).
        self.tok = BertTokenizerFast(
            vocab=str(vocab), do_lower_case=bool(settings.lowercase),
            strip_accents=bool(settings.strip_accents), cls_token=settings.cls_token,
            sep_token=settings.sep_token, pad_token=settings.pad_token,
            unk_token=settings.unk_token, mask_token=settings.mask_token)

    def __call__(self, text: str, pair: str | None = None,
                 warn: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input_ids, attention_mask, token_type_ids), each [1, seq] int64."""
        for label, s in (("text", text), ("second text", pair)):
            if s is not None:
                check_text(label, s)
        full = self.tok(text, pair, truncation=False)["input_ids"]
        enc = self.tok(text, pair, truncation="longest_first", max_length=self.max_length,
                       return_token_type_ids=True)
        if len(enc["input_ids"]) > self.max_length:  # too short for [CLS] a [SEP] b [SEP]
            raise BundleError(f"max_length {self.max_length} cannot hold two texts; re-export "
                              "with --max-len 3 or more")
        if warn and len(full) > self.max_length:
            say(f"warning: input is {len(full)} tokens; truncated to the bundle's max length "
                f"{self.max_length}")
        ids = np.asarray([enc["input_ids"]], dtype=np.int64)
        return ids, np.ones_like(ids), np.asarray([enc["token_type_ids"]], dtype=np.int64)


def check_text(label: str, s: str) -> None:
    if not isinstance(s, str) or not s.strip():
        raise BundleError(f"the {label} is empty; give some words to classify")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:  # undecodable bytes arrive as lone surrogates
        raise BundleError(f"the {label} is not valid UTF-8 (at character {e.start}); pass "
                          "UTF-8 text") from None
