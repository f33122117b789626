"""Carry a BERT folder to a machine that can only receive a few tens of MB (a lent GPU):
`halve` writes its weights as fp16 (half the bytes), `restore` writes them back as fp32 there.
The fp16 rounding (relative 2^-11) is the only change; training starts from the restored copy.

    python -m lab.carry halve SRC_BERT_FOLDER DST
    python -m lab.carry restore DST FOLDER_TO_TRAIN_FROM
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from palkit.trainer.checkpoint import TRUNK_WEIGHTS

KEEP = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
        "special_tokens_map.json")


def convert(src: Path, dst: Path, dtype: torch.dtype) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in KEEP:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    tensors = load_file(src / TRUNK_WEIGHTS)
    save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()},
              dst / TRUNK_WEIGHTS, metadata={"format": "pt"})


if __name__ == "__main__":
    verb, src, dst = sys.argv[1:4]
    convert(Path(src), Path(dst), {"halve": torch.float16, "restore": torch.float32}[verb])
