"""`palkit demo`: a read-eval-print loop over a loaded bundle."""
from __future__ import annotations

import sys

from export.runtime import BundleError, Engine

PAIR_SEPARATOR = "|||"
QUIT = (":quit", ":q", ":exit")


def _read_line(interactive: bool) -> str | None:
    """The next line, or None at end of input. On a terminal, input() gives readline editing."""
    if interactive:
        try:
            return input("> ")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


def run_demo(engine: Engine, load_ms: float) -> None:
    tasks = list(engine.bundle.tasks)
    print(f"palkit demo: {engine.bundle.folder} on {engine.runtime}; trunk loaded in "
          f"{load_ms:.0f} ms (file checks {engine.bundle.verify_seconds * 1000:.0f} ms)")
    for t in tasks:
        print(f"  adapter {t}: first swap {engine.swap(t):.1f} ms, swap back "
              f"{engine.swap(t):.2f} ms")
    print(f"tasks: {', '.join(tasks)}. Type text (pairs: a {PAIR_SEPARATOR} b), ':task NAME', "
          "':all', ':quit'.")
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (importing it gives input() history and line editing)
    selected = tasks
    while (line := _read_line(interactive)) is not None:
        line = line.strip()
        if line in QUIT:
            break
        if line.startswith(":"):
            selected = _command(line, tasks, selected)
        elif line:
            _predict_line(engine, selected, line)


def _command(line: str, tasks: list[str], selected: list[str]) -> list[str]:
    """`:all` or `:task NAME`: the tasks the next lines run, confirmed on screen."""
    if line == ":all":
        print(f"  running every task: {', '.join(tasks)}")
        return tasks
    if line.startswith(":task"):
        name = line[5:].strip()
        if name in tasks:
            print(f"  running only {name}")
            return [name]
        print(f"error: no task '{name}' (tasks: {', '.join(tasks)})")
        return selected
    print(f"error: unknown command '{line}'; use :task NAME, :all or :quit")
    return selected


def _predict_line(engine: Engine, selected: list[str], line: str) -> None:
    parts = [s.strip() for s in line.split(PAIR_SEPARATOR, 1)]
    a, b = parts[0], (parts[1] if len(parts) == 2 else None)
    for name in selected:
        info = engine.bundle.tasks[name]
        if info.is_pair != (b is not None):
            need = f"two texts (a {PAIR_SEPARATOR} b)" if info.is_pair else "one text"
            print(f"  {name}: skipped, needs {need}")
            continue
        try:
            p = engine.predict(name, a, b if info.is_pair else None)
        except BundleError as e:
            print(f"  error: {e}")
            return
        swap = f", swap {p.swap_ms:.2f} ms" if p.swap_ms else ""
        print(f"  {p.summary():40s} {p.latency_ms:7.1f} ms{swap}")
