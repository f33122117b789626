"""Help screens: one correction to Typer's rich help, made once for every command."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer


def _commands(command: Any) -> Iterator[Any]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _commands(sub)


def flags_without_types(command: Any) -> Any:
    """Typer 0.29 prints `<bool>` beside every flag (--help included) as if it took a value; a
    flag takes none, so its type column is left empty. Returns `command`, changed in place."""
    names = command.context_settings.get("help_option_names", ["--help"])
    for cmd in _commands(command):
        help_option = cmd.get_help_option(typer.Context(cmd, help_option_names=names))
        for param in [*cmd.params, help_option]:
            if getattr(param, "is_flag", False):
                param.metavar = ""
    return command
