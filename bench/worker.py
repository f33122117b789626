"""One benchmark measurement in a fresh process: `python -m palkit.bench.worker SPEC.json OUT.json`.

One process per configuration, so that the thread pools, caches and allocators of one never
touch another's numbers. A subject is a set of task models run by one runtime:
    {"name": "pal-all", "runtime": "executorch" | "onnxruntime" | "torch", "vocab_size": N,
     "tasks": {"sst": SOURCE, ...}, "all_tasks": SOURCE | null}
with SOURCE one of
    {"format": "bundle", "bundle": DIR, "task": NAME}     a palkit bundle (runtime/BUNDLE.md)
    {"format": "pte", "path": FILE, "inputs": "mask4d"}  a single-model .pte (peer)
    {"format": "onnx", "path": FILE}                      a single-model .onnx (peer)
    {"format": "torch", "model_dir": DIR}                 a palkit model folder, PyTorch eager

The spec adds "threads" and "mode": "latency" (with "seq_len", "configs", "warmup", "runs",
"min_seconds", "max_seconds", "block"), "load", "load_program" (the all-tasks program alone),
"pairs" ("subjects" by name and "ratios", each two sides of a subject and a config, timed
against each other: bench/pairs.py) or "ceiling". Timings are wall-clock around the runtime's
Python call, batch 1.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import psutil

from palkit.bench.machine import measure_ceiling
from palkit.bench.schema import ALL_TASKS, percentile
from palkit.runtime import runners
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.manifest import TEXT_INPUTS


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def synthetic_input(seq_len: int, vocab_size: int) -> dict[str, Any]:
    """[CLS] w... [SEP] w... [SEP] with every token attended; a pair layout (types 0 then 1)
    so that pair tasks see what they were trained on. Ids avoid the special tokens."""
    import numpy as np

    lo, hi = min(1000, vocab_size // 2), vocab_size
    ids = lo + (np.arange(seq_len, dtype=np.int64) * 7919) % max(1, hi - lo)
    ids[0], ids[-1] = min(101, vocab_size - 1), min(102, vocab_size - 1)
    types_ = np.zeros(seq_len, dtype=np.int64)
    types_[seq_len // 2:] = 1
    return {"input_ids": ids[None], "attention_mask": np.ones((1, seq_len), dtype=np.int64),
            "token_type_ids": types_[None]}


# ---- runners: load(task) makes a task runnable, run(task, x) runs it once ----------------------

class TorchRunner:
    errors: tuple[type[BaseException], ...] = (RuntimeError,)  # a refused input or shape

    def __init__(self, threads: int):
        import torch

        from palkit.trainer.checkpoint import load_model  # transformers: an import, not the load
        torch.set_num_threads(threads)
        self.torch, self.load_model = torch, load_model
        self.models: dict[str, Any] = {}

    def load(self, task: str, src: dict[str, Any]) -> None:
        model, _, _ = self.load_model(Path(src["model_dir"]))
        self.models[task] = (model, next(iter(model.tasks)))

    def run(self, task: str, x: dict[str, Any]) -> Any:
        model, name = self.models[task]
        t = {k: self.torch.from_numpy(v) for k, v in x.items()}
        with self.torch.inference_mode():
            return model(*(t[n] for n in TEXT_INPUTS), task=name).numpy()


class RuntimeRunner:
    """Bundles through palkit's runtime layer, exactly as predict runs them (load_bundle's
    checks of every file, then Engine: the first `load` of a task is its swap); a peer's single
    model file through the same layer's loaders (runtime/runners.py)."""

    def __init__(self, runtime: str, threads: int, trust_key: Path | None = None):
        self.runtime, self.threads, self.trust_key = runtime, threads, trust_key
        if runtime == "executorch":
            runners.set_executorch_threads(threads)
        self.errors = (RuntimeError,) + (runners.ort_errors() if runtime == "onnxruntime" else ())
        self.engines: dict[str, Engine] = {}
        self.loaded: dict[str, Any] = {}

    def engine(self, folder: str) -> Engine:
        if folder not in self.engines:
            # every task's file checked at load: ExecuTorch reads them all there (predict's
            # default), so a swap binds tensors already in memory
            bundle = load_bundle(folder, runtime=self.runtime, trust_key=self.trust_key)
            self.engines[folder] = Engine(bundle, self.runtime, self.threads)
        return self.engines[folder]

    def load(self, task: str, src: dict[str, Any]) -> None:
        """All of the load (delegate init, weight packing), so the first run is an ordinary run."""
        if src["format"] == "bundle":
            engine = self.engine(src["bundle"])
            if src["task"] == ALL_TASKS:
                engine.load_all_tasks()
            else:
                engine.swap(src["task"])
            self.loaded[task] = ("bundle", engine, src["task"])
        elif src["format"] == "pte":
            method = runners.load_executorch_program(Path(src["path"])).load_method("forward")
            self.loaded[task] = ("pte", method, src.get("inputs"))
        else:
            session = runners.ort_session(Path(src["path"]), self.threads)
            self.loaded[task] = ("onnx", session, {i.name for i in session.get_inputs()})

    def run(self, task: str, x: dict[str, Any]) -> Any:
        kind, handle, detail = self.loaded[task]
        if kind == "bundle":
            ids, mask, types_ = (x[n] for n in TEXT_INPUTS)
            if detail == ALL_TASKS:
                return list(handle.run_all_ids(ids, mask, types_)[0].values())
            return handle.run_ids(detail, ids, mask, types_)[0]
        if kind == "onnx":
            return handle.run(None, {k: v for k, v in x.items() if k in detail})
        import torch
        t = {k: torch.from_numpy(v) for k, v in x.items()}
        if detail == "mask4d":
            mask = (1.0 - t["attention_mask"][:, None, None, :].float()) * -1e9
            args = (t["input_ids"], t["token_type_ids"], mask)
        else:
            args = tuple(t[n] for n in TEXT_INPUTS)
        return [o.numpy() for o in handle(args)]


def make_runner(subject: dict[str, Any], threads: int) -> TorchRunner | RuntimeRunner:
    if subject["runtime"] == "torch":
        return TorchRunner(threads)
    key = subject.get("trust_key")
    return RuntimeRunner(subject["runtime"], threads, Path(key) if key else None)


def _sane(outputs: Any) -> list[list[int]]:
    import numpy as np
    arrays = [np.asarray(o) for o in (outputs if isinstance(outputs, list) else [outputs])]
    for a in arrays:
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise RuntimeError("the model produced non-finite outputs")
    return [list(a.shape) for a in arrays]


def timed_ms(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """fn(*args) and the wall-clock milliseconds it took."""
    t0 = time.perf_counter_ns()
    out = fn(*args)
    return out, (time.perf_counter_ns() - t0) / 1e6


# ---- modes -------------------------------------------------------------------------------------

def measure_load(spec: dict[str, Any]) -> dict[str, Any]:
    subject = spec["subject"]
    base = rss_bytes()
    runner = make_runner(subject, spec["threads"])
    after_import = rss_bytes()
    tasks = list(subject["tasks"])
    x = synthetic_input(spec.get("seq_len", 128), subject["vocab_size"])

    def run_checked(task: str) -> list[list[int]]:
        return _sane(runner.run(task, x))

    _, load_ms = timed_ms(runner.load, tasks[0], subject["tasks"][tasks[0]])
    shapes = {}
    shapes[tasks[0]], first_run_ms = timed_ms(run_checked, tasks[0])
    rss_one, peak_one = rss_bytes(), peak_rss_bytes()
    swaps, first_after_swap = {}, {}
    for task in tasks[1:]:
        _, swaps[task] = timed_ms(runner.load, task, subject["tasks"][task])
        shapes[task], first_after_swap[task] = timed_ms(run_checked, task)
    for task in tasks:  # every task resident and run once more
        runner.run(task, x)
    return {
        "load_ms": load_ms, "first_run_ms": first_run_ms,
        "swap_ms": swaps, "first_run_after_swap_ms": first_after_swap,
        "rss_before_import": base, "rss_after_import": after_import,
        "rss_one_task": rss_one, "peak_rss_one_task": peak_one,
        "rss_all_tasks": rss_bytes(), "peak_rss_all_tasks": peak_rss_bytes(),
        "tasks": tasks, "output_shapes": shapes,
    }


def measure_program_load(spec: dict[str, Any]) -> dict[str, Any]:
    """Load only the subject's all-tasks program and run it once: all tasks resident."""
    subject = spec["subject"]
    runner = make_runner(subject, spec["threads"])
    after_import = rss_bytes()
    _, load_ms = timed_ms(runner.load, ALL_TASKS, subject["all_tasks"])
    shapes = _sane(runner.run(ALL_TASKS, synthetic_input(spec.get("seq_len", 128),
                                                         subject["vocab_size"])))
    return {"load_ms": load_ms, "rss_after_import": after_import, "rss": rss_bytes(),
            "peak_rss": peak_rss_bytes(), "output_shapes": shapes}


def time_interleaved(fns: dict[str, Any], warmup: int, runs: int, min_seconds: float,
                     max_seconds: float, block: int = 1) -> dict[str, list[float]]:
    """Milliseconds per call of each function, timed in rounds so that a slow spell of a shared
    machine lands on every configuration alike. A round runs each function `block` times in a
    row; with block > 1 a block's first call is not kept: it refills the CPU caches with that
    model's weights after the others ran (separate models evict each other; one model alone does
    not). Stops at `runs` samples each after `min_seconds`, or at `max_seconds` per function."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    start = time.perf_counter()
    while True:
        for name, fn in fns.items():
            for call in range(block):
                _, ms = timed_ms(fn)
                if call or block == 1:
                    samples[name].append(ms)
        elapsed = time.perf_counter() - start
        enough = min(len(v) for v in samples.values()) >= runs and elapsed >= min_seconds
        if enough or elapsed >= max_seconds * len(fns):
            return samples


class Loaded:
    """A subject's runner with every task (and its all-tasks program) loaded, and the synthetic
    input its configurations run on."""

    def __init__(self, subject: dict[str, Any], threads: int, seq_len: int):
        self.runner = runner = make_runner(subject, threads)
        self.tasks = list(subject["tasks"])
        for task in self.tasks:
            runner.load(task, subject["tasks"][task])
        self.has_program = subject.get("all_tasks") is not None
        if self.has_program:
            runner.load(ALL_TASKS, subject["all_tasks"])
        self.x = synthetic_input(seq_len, subject["vocab_size"])

    def run_each(self) -> list[Any]:  # all tasks without an all-tasks program
        return [self.runner.run(t, self.x) for t in self.tasks]

    def call(self, config: str) -> Callable[[], Any]:
        """One call of `config` ("task:<name>" or "all_tasks"), checked once before it is timed."""
        if config == "all_tasks":
            fn = partial(self.runner.run, ALL_TASKS, self.x) if self.has_program else self.run_each
        else:
            fn = partial(self.runner.run, config.split(":", 1)[1], self.x)
        _sane(fn()[0] if fn == self.run_each else fn())
        return fn


def measure_latency(spec: dict[str, Any]) -> dict[str, Any]:
    loaded = Loaded(spec["subject"], spec["threads"], spec["seq_len"])
    rows: dict[str, dict[str, Any]] = {}
    fns = {}
    for config in spec["configs"]:
        row: dict[str, Any] = {"config": config}
        if config == "all_tasks":
            row["all_tasks_mode"] = "program" if loaded.has_program else "sequential"
        try:
            fns[config] = loaded.call(config)
        except loaded.runner.errors as e:  # one refused configuration must not hide the others
            row.update(p50_ms=None, p90_ms=None, runs=0,
                       error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
        rows[config] = row
    block = spec.get("block", 1)
    if fns:
        timed = time_interleaved(fns, spec.get("warmup", 3), spec.get("runs", 20),
                                 spec.get("min_seconds", 0.5), spec.get("max_seconds", 10.0),
                                 block)
        for config, samples in timed.items():
            rows[config].update(p50_ms=percentile(samples, 50), p90_ms=percentile(samples, 90),
                                mean_ms=sum(samples) / len(samples), min_ms=min(samples),
                                runs=len(samples))
    untimed = ", the first of them untimed" if block > 1 else ""
    return {"rows": list(rows.values()), "timing": f"interleaved rounds: {block} calls of each "
            f"configuration in a row per round{untimed}"}


def measure_pairs(spec: dict[str, Any]) -> dict[str, Any]:
    """Every ratio of one runtime in this one process. Each subject is loaded once (a ratio
    whose two sides run one subject loads it a second time for its denominator); a ratio's two
    sides are called in alternating blocks: pair i runs num then den, pair i+1 den then num, so
    a drifting machine moves both alike. A block's first call refills the caches with its side's
    weights and is not kept; the block's median is the pair's figure."""
    loaded: dict[tuple[str, int], Loaded] = {}

    def side(name: str, copy: int) -> Loaded:
        if (name, copy) not in loaded:
            loaded[name, copy] = Loaded(spec["subjects"][name], spec["threads"], spec["seq_len"])
        return loaded[name, copy]

    block, timings = spec["block"], {}
    for ratio in spec["ratios"]:
        num, den = ratio["num"], ratio["den"]
        # one ratio that cannot run (a subject that fails to load, a refused configuration) must
        # not cost the others in this process their figures
        try:
            fns = [side(num["subject"], 0).call(num["config"]),
                   side(den["subject"], int(den["subject"] == num["subject"])).call(den["config"])]
        except Exception as e:  # noqa: BLE001 - recorded for this ratio, reported by the bench
            timings[ratio["id"]] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            continue
        for fn in fns:
            for _ in range(spec.get("warmup", 3)):
                fn()
        times: tuple[list[float], list[float]] = ([], [])
        for i in range(spec["pairs"]):
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                samples = [timed_ms(fns[which])[1] for _ in range(block)]
                times[which].append(percentile(samples[1:] if block > 1 else samples, 50))
        timings[ratio["id"]] = {"num_ms": times[0], "den_ms": times[1]}
    return {"ratios": timings}


MODES = {"load": measure_load, "load_program": measure_program_load, "latency": measure_latency,
         "pairs": measure_pairs,
         "ceiling": lambda spec: measure_ceiling(spec["threads"], spec.get("min_seconds", 0.5))}


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    spec = json.loads(Path(spec_path).read_text())
    mode = spec["mode"]
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode}")
    started = time.time()
    result = MODES[mode](spec)
    result.update(mode=mode, threads=spec.get("threads"), pid=os.getpid(),
                  wall_s=time.time() - started, load_avg_1min=os.getloadavg()[0])
    Path(out_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
