"""The engine everybody calls to run a bundle: tokenize, run a task (or all of them) on ExecuTorch
or ONNX Runtime, decode.

    bundle = load_bundle("bundles/NAME", runtime="onnxruntime", tasks=["sst"])
    engine = Engine(bundle, runtime="onnxruntime")    # loads the trunk once
    engine.predict("sst", "a fine film")              # swaps to sst's adapter, runs, decodes

Engine.run_ids holds a lock, so one engine may be shared by threads. How each runtime opens and
runs its files is runtime/runners.py's.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from palkit.runtime.bundle import Bundle, check_runtime
from palkit.runtime.decode import Prediction, make_prediction
from palkit.runtime.inputs import InputError, Texts, tasks_for
from palkit.runtime.manifest import BundleError
from palkit.runtime.runners import RUNNERS, TaskRunner
from palkit.runtime.tokenizer import Tokenizer


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
                              "(bundles of several tasks exported with --all-tasks have one); "
                              "run the tasks one by one")
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
        words = self.tokenizer.words(text) if info.is_tagging else None
        ids, mask, types = (words.ids, words.mask, words.types) if words else \
            self.tokenizer(text, pair)
        out, ms, swap_ms = self.run_ids(task, ids, mask, types)
        return make_prediction(info, out, ids.shape[1], ms, swap_ms, words)

    def ready(self, tasks: list[str]) -> None:
        """Load what running `tasks` needs now, so that no later call's latency includes it."""
        if self.all_tasks_program() == tasks:  # one call runs them
            self.load_all_tasks()
        else:
            for name in tasks:
                self.swap(name)

    def predict_all(self, texts: Texts) -> list[Prediction]:
        """Every task that reads this input (runtime/inputs.py's rule: one text the single-text
        tasks, two texts the pair tasks); one call when they are the all-tasks program's."""
        chosen = [t.name for t in tasks_for(self.bundle.tasks.values(), texts)[0]]
        if not chosen:
            raise InputError(f"{self.bundle.folder}: no task reads {texts.count} text(s)")
        if self.all_tasks_program() != chosen:
            return [self.predict(name, texts.first, texts.second) for name in chosen]
        # a tagging task needs the words; its tokens equal the plain text's
        tagging = any(self.bundle.tasks[t].is_tagging for t in chosen)
        words = self.tokenizer.words(texts.first) if tagging else None
        ids, mask, types = (words.ids, words.mask, words.types) if words else \
            self.tokenizer(texts.first, texts.second)
        outs, ms = self.run_all_ids(ids, mask, types)
        return [make_prediction(self.bundle.tasks[t], outs[t], ids.shape[1], ms, 0.0, words)
                for t in chosen]
