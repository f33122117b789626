"""Host runtime for bundles: check, tokenize, run a task on ExecuTorch or ONNX Runtime.

    bundle = load_bundle("bundles/NAME", runtime="onnxruntime", tasks=["sst"])
    engine = Engine(bundle, runtime="onnxruntime")    # loads the trunk once
    engine.predict("sst", "a fine film")              # swaps to sst's adapter, runs, returns

`load_bundle` checks the manifest and the files the caller will load; any other file is checked
the first time it is used (export/BUNDLE.md, "Loading on the host"). Every refusal is a
BundleError: one line naming the file and what to do. Engine.run_ids holds a lock, so one engine
may be shared by threads.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from palkit.core.fileio import file_digest
from palkit.export.engines import RUNNERS, TaskRunner
from palkit.export.inputs import InputError, Texts, tasks_for
from palkit.export.manifest import (MANIFEST_FILE, BundleError, Manifest, TaskEntry, read_manifest,
                                    safe_path)
from palkit.export.tokenizer import Tokenizer


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
    signature first (export/signing.py: before the manifest is parsed), then the manifest and
    the files of `runtime` and `tasks` (None: every runtime, every task). Other files are
    checked when first used."""
    from palkit.export.signing import resolve_trust_key, verify_bundle_signature

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


@dataclass
class Prediction:
    task: str
    outputs: list[float]          # logits, or [score] for regression
    label: str | None = None      # classification
    probabilities: list[float] | None = None
    score: float | None = None    # regression
    tokens: int = 0
    latency_ms: float = 0.0
    swap_ms: float = 0.0

    def summary(self) -> str:
        if self.score is not None:
            return f"{self.task}: score {self.score:.3f}"
        p = max(self.probabilities or [0.0])
        return f"{self.task}: {self.label} ({p:.0%})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Engine:
    """A loaded bundle on one runtime. Thread-safe: run() holds a lock."""
    bundle: Bundle
    runtime: str = ""
    threads: int | None = None

    def __post_init__(self) -> None:
        self.runtime = self.runtime or self.bundle.runtimes[0]
        check_runtime(self.bundle, self.runtime)
        settings = self.bundle.manifest.tokenizer
        self.tokenizer = Tokenizer(settings, self.bundle.path(settings.vocab_file, "tokenizer"))
        self.impl: TaskRunner = RUNNERS[self.runtime](self.bundle, self.threads)
        self.lock = threading.Lock()
        self.active: str | None = None

    def swap(self, task: str) -> float:
        """Make `task` current; returns milliseconds (first swap loads its adapter)."""
        info = self.bundle.task(task)
        t0 = time.perf_counter()
        self.impl.select(info)
        self.active = task
        return (time.perf_counter() - t0) * 1000

    def run_ids(self, task: str, ids, mask, types) -> tuple[np.ndarray, float, float]:
        info = self.bundle.task(task)
        with self.lock:
            swap_ms = self.swap(task) if self.active != task else 0.0
            t0 = time.perf_counter()
            out = np.array(self.impl.run(info, ids, mask, types), dtype=np.float32)
            return out, (time.perf_counter() - t0) * 1000, swap_ms

    def load_all_tasks(self) -> list[str]:
        """Load the all-tasks program now (else its first run does); returns its tasks."""
        self.all_tasks_or_refuse()
        return self.impl.load_all()

    def all_tasks_or_refuse(self) -> list[str]:
        tasks = self.all_tasks_program()
        if tasks is None:
            raise BundleError(f"{self.bundle.folder}: no all-tasks program for {self.runtime} "
                              "(ExecuTorch bundles of several tasks have one); run the tasks "
                              "one by one")
        return tasks

    def all_tasks_program(self) -> list[str] | None:
        """The tasks of the bundle's all-tasks program on this runtime, or None without one."""
        program = self.bundle.manifest.all_tasks(self.runtime)
        return list(program.tasks) if program else None

    def run_all_ids(self, ids, mask, types) -> tuple[dict[str, np.ndarray], float]:
        """Every task of the all-tasks program on one input, in one call; returns outputs, ms."""
        self.all_tasks_or_refuse()
        with self.lock:
            t0 = time.perf_counter()
            outs = self.impl.run_all(ids, mask, types)
            self.active = None  # the next single-task run selects its program again
            return ({t: np.array(o, dtype=np.float32) for t, o in outs.items()},
                    (time.perf_counter() - t0) * 1000)

    def predict(self, task: str, text: str, pair: str | None = None) -> Prediction:
        info = self.bundle.task(task)
        if info.is_pair and pair is None:
            raise BundleError(f"task '{task}' ({info.kind}) needs two texts; give a second text")
        if not info.is_pair and pair is not None:
            raise BundleError(f"task '{task}' takes one text, got two")
        ids, mask, types = self.tokenizer(text, pair)
        out, ms, swap_ms = self.run_ids(task, ids, mask, types)
        return make_prediction(info, out, ids.shape[1], ms, swap_ms)

    def ready(self, tasks: list[str]) -> None:
        """Load what running `tasks` needs now, so that no later call's latency includes it."""
        if self.all_tasks_program() == tasks:  # one call runs them
            self.load_all_tasks()
        else:
            for name in tasks:
                self.swap(name)

    def predict_all(self, texts: Texts) -> list[Prediction]:
        """Every task that reads this input (export/inputs.py's rule: one text the single-text
        tasks, two texts the pair tasks); one call when they are the all-tasks program's."""
        chosen = [t.name for t in tasks_for(self.bundle.tasks.values(), texts)[0]]
        if not chosen:
            raise InputError(f"{self.bundle.folder}: no task reads {texts.count} text(s)")
        if self.all_tasks_program() != chosen:
            return [self.predict(name, texts.first, texts.second) for name in chosen]
        ids, mask, types = self.tokenizer(texts.first, texts.second)
        outs, ms = self.run_all_ids(ids, mask, types)
        return [make_prediction(self.bundle.tasks[t], outs[t], ids.shape[1], ms, 0.0)
                for t in chosen]


def make_prediction(info: TaskEntry, out: np.ndarray, tokens: int, ms: float,
                    swap_ms: float) -> Prediction:
    outs = [float(x) for x in out]
    if info.is_regression:
        return Prediction(info.name, outs, score=outs[0], tokens=tokens, latency_ms=ms,
                          swap_ms=swap_ms)
    e = np.exp(out - out.max())
    probs = e / e.sum()
    return Prediction(info.name, outs, label=(info.labels or [])[int(out.argmax())],
                      probabilities=[float(p) for p in probs], tokens=tokens, latency_ms=ms,
                      swap_ms=swap_ms)
