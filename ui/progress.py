"""Progress for long loops: a rich bar with ETA on a terminal, plain lines on stderr otherwise.

Everything goes to stderr so a command's real output (stdout: tables, JSON) stays clean to pipe.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

T = TypeVar("T")

_stderr = Console(stderr=True, highlight=False, soft_wrap=True)  # log lines stay whole


def say(message: str) -> None:
    """One status line on stderr."""
    _stderr.print(message, markup=False)


def _bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=_stderr, transient=False)


def track(items: Iterable[T], description: str) -> Iterator[T]:
    """Yield `items`, showing progress: a live bar on a terminal, one line per item otherwise."""
    total = len(items) if hasattr(items, "__len__") else None
    if _stderr.is_terminal:
        with _bar() as bar:
            task = bar.add_task(description, total=total, status="")
            for item in items:
                yield item
                bar.advance(task)
        return
    start = time.monotonic()
    for done, item in enumerate(items, 1):
        yield item
        elapsed = time.monotonic() - start
        of = f"/{total}" if total else ""
        eta = f", ETA {elapsed / done * (total - done):.0f} s" if total else ""
        print(f"{description}: {done}{of} ({elapsed:.0f} s{eta})", file=sys.stderr, flush=True)


class StepBar:
    """A bar over a known number of steps whose status text changes (training: loss, dev score):
    a live rich bar on a terminal, otherwise a line every PLAIN_EVERY steps."""
    PLAIN_EVERY = 50

    def __init__(self, description: str, total: int, done: int = 0) -> None:
        self.total, self.done = total, done
        self.description, self.status = description, ""
        self._start, self._start_done = time.monotonic(), done
        self._bar = _bar() if _stderr.is_terminal else None
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(description, total=total, completed=done, status="")

    def update(self, status: str) -> None:
        """One more step done, and its status text."""
        self.done += 1
        self.status = status
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, status=self.status)
        elif self.done % self.PLAIN_EVERY == 0 or self.done == self.total:
            say(self.line())

    def line(self) -> str:
        elapsed = time.monotonic() - self._start
        rate = (self.done - self._start_done) / elapsed if elapsed > 0 else 0.0
        eta = f", ETA {(self.total - self.done) / rate:.0f} s" if rate > 0 else ""
        return f"{self.description}: {self.done}/{self.total} {self.status} ({elapsed:.0f} s{eta})"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
