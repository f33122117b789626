"""Figures as a user gets them: matplotlib without a display, PNGs written atomically."""
from __future__ import annotations

import io
from pathlib import Path

from palkit.core.fileio import write_bytes

DPI = 100


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: Path) -> None:
    """Render to memory, then write atomically (a reader never sees half a PNG)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    write_bytes(path, buf.getvalue())
    pyplot().close(fig)
