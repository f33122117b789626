"""Command-line options that several command groups take, each defined once.

Typer annotations only (no heavy imports): `trainer`, `export`, `bench` and `studies` commands
all import from here, so a flag is spelled, typed and documented the same everywhere.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from trainer.config import DATA_DIR_HELP, TRUST_KEY_ENV

# Help panels shared by several command groups
TRAINING, SCORING = "Training", "Scoring and results"


DataDirOption = Annotated[Optional[str], typer.Option(
    "--data-dir", metavar="DIR",
    help=f"folder with one sub-folder per task {DATA_DIR_HELP}")]
TrustKeyOption = Annotated[Optional[Path], typer.Option(
    "--trust-key", metavar="PUB",
    help="refuse a bundle unless it carries this public key's signature (model.sig), checked "
    f"before any runtime reads a byte (default ${TRUST_KEY_ENV})")]

