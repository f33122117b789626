"""Command-line options that several command groups take, each defined once.

Typer annotations only (no heavy imports): `trainer`, `export`, `bench` and `studies` commands
all import from here, so a flag is spelled, typed and documented the same everywhere.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from trainer.config import DATA_DIR_ENV, TRUST_KEY_ENV

RuntimeName = Literal["executorch", "onnxruntime"]
# Help panels shared by several command groups
TRAINING, SCORING = "Training", "Scoring and results"


def _trust(key: Optional[Path]) -> Optional[Path]:
    """--trust-key sets $PALKIT_TRUST_KEY for this process and the workers it starts: every
    bundle loader checks the signature against the key the variable names."""
    if key is not None:
        os.environ[TRUST_KEY_ENV] = str(key)
    return key


DataDirOption = Annotated[Optional[str], typer.Option(
    "--data-dir", metavar="DIR",
    help=f"folder with one sub-folder per task (default ${DATA_DIR_ENV}, then ../shared/data)")]
TrustKeyOption = Annotated[Optional[Path], typer.Option(
    "--trust-key", metavar="PUB", callback=_trust,
    help="refuse a bundle unless it carries this public key's signature (model.sig), checked "
    f"before any runtime reads a byte (default ${TRUST_KEY_ENV})")]
RuntimeOption = Annotated[Optional[RuntimeName], typer.Option(
    help="which runtime runs the bundle (default: its first; executorch when present)")]
ThreadsOption = Annotated[int, typer.Option(help="CPU threads the runtime may use")]
