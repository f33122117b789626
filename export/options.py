"""Command-line options about running a bundle, defined once for `export` and `bench` commands
(Typer annotations only: no heavy imports)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from export.manifest import RUNTIMES

RuntimeName = Literal[RUNTIMES]  # type: ignore[valid-type]
RuntimeOption = Annotated[Optional[RuntimeName], typer.Option(
    help="which runtime runs the bundle (default: its first; executorch when present)")]
ThreadsOption = Annotated[int, typer.Option(help="CPU threads the runtime may use")]
