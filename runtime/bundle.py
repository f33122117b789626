"""A bundle folder checked against its manifest: the files a caller will load, their sizes and
SHA-256, and (with a trusted key) the signature before any of it.

`load_bundle` checks the manifest and the files the caller will load; any other file is checked
the first time it is used (runtime/BUNDLE.md, "Loading on the host"). Every refusal is a
BundleError: one line naming the file and what to do.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from palkit.core.fileio import file_digest
from palkit.runtime.manifest import (MANIFEST_FILE, BundleError, Manifest, TaskEntry, read_manifest,
                                     safe_path)


@dataclass
class Bundle:
    folder: Path
    manifest: Manifest
    verify_seconds: float = 0.0                        # time spent checking files
    checked: set[str] = field(default_factory=set)    # files whose size and SHA-256 matched
    tasks: dict[str, TaskEntry] = field(init=False)    # by name, in manifest order

    def __post_init__(self) -> None:
        self.tasks = {t.name: t for t in self.manifest.tasks}

    @property
    def runtimes(self) -> list[str]:
        return self.manifest.runtime_names

    def task(self, name: str) -> TaskEntry:
        if name not in self.tasks:
            raise BundleError(f"{self.folder}: no task '{name}' (it has: "
                              f"{', '.join(self.tasks)})")
        return self.tasks[name]

    def path(self, rel: str, owner: str = "file") -> Path:
        """The file's path, after checking it against the manifest (once per file)."""
        full = safe_path(self.folder, rel, owner)
        if rel in self.checked:
            return full
        want = self.manifest.files.get(rel)
        if want is None:
            raise BundleError(f"{self.folder / MANIFEST_FILE}: {owner} names '{rel}', which is "
                              "not listed under 'files'; re-export the bundle")
        if not full.is_file():
            raise BundleError(f"{full}: missing ({owner}); copy the whole bundle folder again "
                              "or re-export it")
        t0 = time.perf_counter()
        digest, size = file_digest(full)
        self.verify_seconds += time.perf_counter() - t0
        if size != want.bytes:
            raise BundleError(f"{full}: {size} bytes, manifest says {want.bytes} (truncated or "
                              "replaced); copy the bundle again or re-export it")
        if digest != want.sha256:
            raise BundleError(f"{full}: SHA-256 differs from the manifest (corrupt or swapped "
                              "file); copy the bundle again or re-export it")
        self.checked.add(rel)
        return full


def load_bundle(folder: str | Path, runtime: str | None = None, tasks: list[str] | None = None,
                trust_key: Path | None = None) -> Bundle:
    """Read and check a bundle: with a trusted key (`trust_key`, else $PALKIT_TRUST_KEY) its
    signature first (runtime/signing.py: before the manifest is parsed), then the manifest and
    the files of `runtime` and `tasks` (None: every runtime, every task). Other files are
    checked when first used."""
    from palkit.runtime.signing import resolve_trust_key, verify_bundle_signature

    key = resolve_trust_key(trust_key)
    if key is not None:
        verify_bundle_signature(Path(folder), key, check_files=False)
    return read_bundle(folder, runtime, tasks)


def read_bundle(folder: str | Path, runtime: str | None = None,
                tasks: list[str] | None = None) -> Bundle:
    """load_bundle without the signature: for a bundle this process just wrote (export)."""
    bundle = Bundle(Path(folder), read_manifest(folder))
    if runtime is not None:
        check_runtime(bundle, runtime)
    for name in tasks or []:
        bundle.task(name)
    needed = bundle.manifest.files_for(None if runtime is None else [runtime], tasks)
    for rel, owner in needed.items():
        bundle.path(rel, owner)
    return bundle


def check_runtime(bundle: Bundle, runtime: str) -> None:
    if runtime not in bundle.runtimes:
        raise BundleError(f"{bundle.folder}: exported without {runtime} (it has "
                          f"{', '.join(bundle.runtimes)}); use --runtime {bundle.runtimes[0]} "
                          "or re-export with that target")
