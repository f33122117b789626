"""`palkit demo`: a read-eval-print loop over a loaded bundle."""
from __future__ import annotations

import sys

from palkit.runtime.engine import Engine
from palkit.runtime.inputs import PAIR_SEPARATOR, InputError, needs, split_line, tasks_for
from palkit.runtime.manifest import BundleError

QUIT = (":quit", ":q", ":exit")


def _read_line(interactive: bool) -> str | None:
    """The next line, or None at end of input. On a terminal, input() gives readline editing."""
    if interactive:
        try:
            return input("> ")
        except EOFError:
            return None
    return sys.stdin.readline() or None


def run_demo(engine: Engine, load_ms: float, import_ms: float) -> None:
    tasks = list(engine.bundle.tasks)
    print(f"palkit demo: {engine.bundle.folder} on {engine.runtime}; bundle loaded in "
          f"{load_ms:.0f} ms (file checks {engine.bundle.verify_seconds * 1000:.0f} ms; importing "
          f"{engine.runtime} took {import_ms:.0f} ms more)")
    for t in tasks:
        print(f"  adapter {t}: first swap {engine.swap(t):.1f} ms, swap back "
              f"{engine.swap(t):.2f} ms")
    print(f"tasks: {', '.join(tasks)}. Type text (pairs: a {PAIR_SEPARATOR} b), ':task NAME', "
          "':all', ':quit'.")
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (importing it gives input() history and line editing)
    selected, empty = tasks, []
    for number, line in enumerate(iter(lambda: _read_line(interactive), None), 1):
        line = line.strip()
        if line in QUIT:
            break
        if line.startswith(":"):
            selected = _command(line, tasks, selected)
        elif line:
            _predict_line(engine, selected, line, f"line {number}")
        else:
            empty.append(number)
    if empty and not interactive:  # on a terminal the user saw the empty line; in a file, not
        print(f"note: {len(empty)} empty line(s) skipped (line {', '.join(map(str, empty))})",
              file=sys.stderr)


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


def _predict_line(engine: Engine, selected: list[str], line: str, where: str) -> None:
    try:
        texts = split_line(line, where)
    except InputError as e:
        print(f"error: {e}")
        return
    chosen, skipped = tasks_for((engine.bundle.tasks[name] for name in selected), texts)
    for info in skipped:
        hint = f" (a {PAIR_SEPARATOR} b)" if info.is_pair else ""
        print(f"  {info.name}: skipped, needs {needs(info)}{hint}")
    for info in chosen:
        try:
            p = engine.predict(info.name, texts.first, texts.second)
        except BundleError as e:
            print(f"  error: {e}")
            return
        swap = f", swap {p.swap_ms:.2f} ms" if p.swap_ms else ""
        print(f"  {p.summary():40s} {p.latency_ms:7.1f} ms{swap}")
