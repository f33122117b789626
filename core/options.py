"""Command-line options that several command groups take, each defined once, and what they mean:
the data folder's resolution, the trusted key's variable, the help panels, comma lists.

No heavy imports: every command group imports from here, so a flag is spelled, typed and
documented the same everywhere.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from palkit.core.env import DATA_DIR_ENV, TRUST_KEY_ENV
from palkit.core.errors import DataError

# Without --data-dir or $PALKIT_DATA_DIR, from the current folder: data/, then ../shared/data
# (this project's workspace keeps the data beside the checkout). Nothing assumes a checkout.
DATA_DIR_FALLBACKS = (Path("data"), Path("../shared/data"))
DATA_DIR_HELP = f"(default ${DATA_DIR_ENV}, then ./data, then ../shared/data)"

# Help panels shared by several command groups
TRAINING, SCORING, MEASURE = "Training", "Scoring and results", "Measure and report"


DataDirOption = Annotated[Optional[str], typer.Option(
    "--data-dir", metavar="DIR",
    help=f"folder with one sub-folder per task {DATA_DIR_HELP}")]
TrustKeyOption = Annotated[Optional[Path], typer.Option(
    "--trust-key", metavar="PUB",
    help="refuse a bundle unless it carries this public key's signature (model.sig), checked "
    f"before any runtime reads a byte (default ${TRUST_KEY_ENV})")]


def resolve_data_dir(cli_value: str | None) -> Path:
    """--data-dir wins, then $PALKIT_DATA_DIR, then the first of DATA_DIR_FALLBACKS that exists."""
    raw = cli_value or os.environ.get(DATA_DIR_ENV)
    if raw:
        path = Path(raw).expanduser()
    else:
        path = next((p for p in DATA_DIR_FALLBACKS if p.is_dir()), DATA_DIR_FALLBACKS[0])
    if not path.is_dir():
        raise DataError(f"data directory {path} does not exist; pass --data-dir DIR or set "
                        f"{DATA_DIR_ENV} to the folder holding sst/, quora/, sts/")
    return path


def comma_words(values: list[str], allowed: tuple[str, ...], flag: str) -> list[str]:
    """Words of a repeatable, comma-separated flag, each one of `allowed`."""
    words = [v for item in values for v in item.split(",") if v]
    unknown = [w for w in words if w not in allowed]
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)}: choose from {', '.join(allowed)}",
                                 param_hint=flag)
    return words
