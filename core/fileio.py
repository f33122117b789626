"""Files and folders written so that a reader sees the old or the new, never half of either.

Files are written under a temporary name, fsync'd and renamed; `replace_dir` swaps an existing
folder for the new one atomically (Linux renameat2 RENAME_EXCHANGE), so a symlink or a reader
that names the final folder never sees it missing.

Every rename goes through `_rename`, `_exchange` or `_swap_link`, and every delete through
`remove_tree`, so tests/test_publish_faults.py can crash between any two of them.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from palkit.core.errors import PalkitError

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
KILL_ENV = "PALKIT_KILL_AT"
_kill_passes: dict[str, int] = {}


def kill_point(name: str) -> None:
    """Test hook: SIGKILL this process here when PALKIT_KILL_AT is `name` or `name:N` (the N-th
    time the process passes this point; default the first). Unset, it costs one environment
    look-up. The points are listed in docs/reliability.md; tests/test_kill_points.py kills a
    real run at each of them and resumes it."""
    wanted = os.environ.get(KILL_ENV)
    if not wanted or wanted.partition(":")[0] != name:
        return
    _kill_passes[name] = _kill_passes.get(name, 0) + 1
    if _kill_passes[name] == int(wanted.partition(":")[2] or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 (hex) and size in bytes."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def sha256_file(path: Path) -> str:
    return file_digest(path)[0]


# ---- the primitive steps (the fault-injection test wraps these) ------------------------------

def _rename(src: Path, dst: Path) -> None:
    os.replace(src, dst)


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths in one atomic step (Linux 3.15+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


def _swap_link(tmp_link: Path, link: Path) -> None:
    os.replace(tmp_link, link)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---- files -----------------------------------------------------------------------------------

def write_bytes(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder and rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _rename(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    """Indented, keys sorted, newline-terminated: the same data always gives the same bytes."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_vocab(tokenizer, path: Path) -> None:
    """vocab.txt (one token per line, id = line number): what WordPiece readers off-Python need."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise PalkitError(f"{path}: the tokenizer's vocabulary ids have gaps; cannot write "
                          "vocab.txt (use a BERT tokenizer with a contiguous vocabulary)")
    write_text(path, "".join(f"{token}\n" for token, _ in by_id))


# ---- folders ---------------------------------------------------------------------------------

def staging_dir(final: Path) -> Path:
    """An empty hidden folder beside `final` (same file system, so it can be renamed there)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    build.chmod(0o755)  # mkdtemp makes it private; what we publish is meant to be shared
    return build


def replace_dir(build: Path, final: Path) -> None:
    """Make the fully written folder `build` appear as `final`; `build` is gone afterwards."""
    if not final.exists():
        _rename(build, final)
        return
    if sys.platform == "linux":
        _exchange(build, final)         # `final` never stops existing
    else:                               # no atomic swap here: `final` is absent for one step
        aside = build.with_name(build.name + ".old")
        _rename(final, aside)
        _rename(build, final)
        build = aside
    remove_tree(build)                  # now the old contents


def point_symlink(link: Path, target_name: str) -> None:
    """Make `link` point at the sibling `target_name`, replacing any old link in one rename."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target_name, tmp)
    _swap_link(tmp, link)
