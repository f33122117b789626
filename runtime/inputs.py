"""What a user typed, checked before any runtime is imported: the texts, and the tasks they feed.

`predict` and `demo` share one rule: one text runs the single-text tasks, two texts the pair
tasks; when every task is asked for, a task that cannot read the input is skipped with a note.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from palkit.core.errors import PalkitError
from palkit.runtime.manifest import BundleError, TaskEntry
from palkit.runtime.tokenizer import check_text

PAIR_SEPARATOR = "|||"


class InputError(PalkitError, ValueError):
    """Text a task cannot read: empty, too many texts, or the wrong number for the task."""


@dataclass(frozen=True)
class Texts:
    first: str
    second: str | None = None   # the pair's second text

    @property
    def count(self) -> int:
        return 1 if self.second is None else 2


def check_texts(texts: list[str], where: str = "") -> Texts:
    """One text, or two for pair tasks; each one the tokenizer takes (not empty, UTF-8)."""
    prefix = f"{where}: " if where else ""
    if not 1 <= len(texts) <= 2:
        raise InputError(f"{prefix}give one text, or two for a pair task; got {len(texts)}")
    for label, text in zip(("text", "second text"), texts):
        try:
            check_text(label, text)
        except BundleError as e:
            raise InputError(f"{prefix}{e}") from None
    return Texts(texts[0], texts[1] if len(texts) == 2 else None)


def split_line(line: str, where: str) -> Texts:
    """A demo line: one text, or two separated by '|||' (more separators are refused, not split
    at the first)."""
    parts = [p.strip() for p in line.split(PAIR_SEPARATOR)]
    if len(parts) > 2:
        raise InputError(f"{where}: {len(parts)} texts separated by '{PAIR_SEPARATOR}'; a line "
                         f"holds one text, or two for a pair task (a {PAIR_SEPARATOR} b)")
    return check_texts(parts, where)


def needs(task: TaskEntry) -> str:
    return "two texts" if task.is_pair else "one text"


def reads(task: TaskEntry, texts: Texts) -> bool:
    """Whether `task` reads this input: pair tasks two texts, single-text tasks one."""
    return task.is_pair == (texts.second is not None)


def tasks_for(tasks: Iterable[TaskEntry], texts: Texts) -> tuple[list[TaskEntry], list[TaskEntry]]:
    """(the tasks that read this input, the tasks skipped), each in the given order."""
    tasks = list(tasks)
    return [t for t in tasks if reads(t, texts)], [t for t in tasks if not reads(t, texts)]


def check_task_reads(task: TaskEntry, texts: Texts) -> None:
    """A task the user named must read the input: refused, not skipped."""
    if not reads(task, texts):
        raise InputError(f"task '{task.name}' ({task.kind}) needs {needs(task)}, got "
                         f"{texts.count}")
