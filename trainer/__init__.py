"""palkit's library: model, data, training, checkpoints (imports nothing above it)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def palkit_version() -> str:
    """The installed palkit's version; in a checkout never pip-installed, pyproject.toml's."""
    try:
        return version("palkit")
    except PackageNotFoundError:
        import tomllib
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]
