"""palkit: one BERT trunk, swappable PAL adapters per task, quantized and exported for phones.

The import package is this repository's root (pyproject.toml maps it): palkit.core (errors, file
I/O, host facts, shared options), palkit.runtime (the torch-free bundle runtime), palkit.trainer,
palkit.quant, palkit.export, palkit.bench, palkit.report, palkit.studies, palkit.ui,
palkit.android_demo.host and palkit.cli. Importing it loads nothing heavy: the runtime's score
worker imports palkit.runtime through it where torch is not installed.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def palkit_version() -> str:
    """The installed palkit's version; in a checkout never pip-installed, pyproject.toml's."""
    try:
        return version("palkit")
    except PackageNotFoundError:
        import tomllib
        pyproject = Path(__file__).resolve().parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]
