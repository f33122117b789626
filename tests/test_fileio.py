"""core/fileio.py: atomic files, folder swaps, symlinked snapshots."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from palkit.core.errors import PalkitError
from palkit.core import fileio


def test_write_json_is_sorted_indented_and_leaves_no_temporary(tmp_path: Path):
    fileio.write_json(tmp_path / "a" / "x.json", {"b": 1, "a": [1, 2]})
    text = (tmp_path / "a" / "x.json").read_text()
    assert text == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"
    assert os.listdir(tmp_path / "a") == ["x.json"]
    assert (tmp_path / "a" / "x.json").stat().st_mode & 0o777 == 0o644


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "x.txt"
    fileio.write_text(path, "old")

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio, "_rename", crash)
    with pytest.raises(OSError):
        fileio.write_text(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["x.txt"]


def test_digest_and_sha256(tmp_path: Path):
    (tmp_path / "f").write_bytes(b"x" * (3 << 20))
    want = hashlib.sha256(b"x" * (3 << 20)).hexdigest()
    assert fileio.file_digest(tmp_path / "f") == (want, 3 << 20)
    assert fileio.sha256_file(tmp_path / "f") == want


def test_replace_dir_swaps_an_existing_folder(tmp_path: Path):
    final, build = tmp_path / "final", tmp_path / "build"
    final.mkdir()
    (final / "old.txt").write_text("old")
    build.mkdir()
    (build / "new.txt").write_text("new")
    inode = final.stat().st_ino
    fileio.replace_dir(build, final)
    assert os.listdir(final) == ["new.txt"] and not build.exists()
    assert final.stat().st_ino != inode
    assert os.listdir(tmp_path) == ["final"]


def test_point_symlink_replaces_the_link(tmp_path: Path):
    for tag in ("a", "b", "b"):            # "b" twice: pointing it where it already points
        (tmp_path / tag).mkdir(exist_ok=True)
        fileio.point_symlink(tmp_path / "link", tag)
        assert os.readlink(tmp_path / "link") == tag
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "link"]


def test_write_vocab_refuses_gaps(tmp_path: Path):
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    fileio.write_vocab(Tok({"[PAD]": 0, "a": 1}), tmp_path / "vocab.txt")
    assert (tmp_path / "vocab.txt").read_text() == "[PAD]\na\n"
    with pytest.raises(PalkitError, match="gaps"):
        fileio.write_vocab(Tok({"[PAD]": 0, "a": 2}), tmp_path / "v2.txt")
