"""Host runtime for bundles: verify, tokenize, run a task on ExecuTorch or ONNX Runtime.

    bundle = load_bundle("bundles/NAME")              # checks every file's size and SHA-256
    engine = Engine(bundle, runtime="executorch")     # loads the trunk once
    engine.predict("sst", "a fine film")              # swaps to sst's adapter, runs, returns

Every refusal is a BundleError (a PalkitError): one line naming the file and what to do.
Engine.run is guarded by a lock, so one engine may be shared by threads.
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from trainer.errors import PalkitError

FORMAT = "palkit-bundle"
VERSION = 1
RUNTIMES = ("executorch", "onnxruntime")
TASK_KINDS = ("single_classification", "pair_classification", "pair_regression")


ALL_TASKS_KEY = "__all_tasks__"  # the all-tasks program's slot among the loaded programs


class BundleError(PalkitError, ValueError):
    """A bundle is missing, corrupt, foreign or cannot run this input."""


def sha256_bytes_of(path: Path) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def safe_path(folder: Path, rel: Any, where: str) -> Path:
    """A manifest path: relative, '/'-separated, no '..', inside the folder."""
    if not isinstance(rel, str) or not rel or "\\" in rel:
        raise BundleError(f"{folder / 'manifest.json'}: {where} path {rel!r} is not a relative "
                          "'/' path; re-export the bundle")
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise BundleError(f"{folder / 'manifest.json'}: {where} path '{rel}' escapes the bundle "
                          "folder; refusing it (re-export the bundle)")
    full = (folder / Path(*p.parts)).resolve()
    if folder.resolve() not in full.parents:
        raise BundleError(f"{folder / 'manifest.json'}: {where} path '{rel}' escapes the bundle "
                          "folder; refusing it (re-export the bundle)")
    return full


@dataclass
class TaskInfo:
    name: str
    kind: str
    labels: list[str] | None
    score_range: list[float] | None
    num_outputs: int
    files: dict[str, str]

    @property
    def is_pair(self) -> bool:
        return self.kind != "single_classification"

    @property
    def is_regression(self) -> bool:
        return self.kind == "pair_regression"


@dataclass
class Bundle:
    folder: Path
    manifest: dict[str, Any]
    tasks: dict[str, TaskInfo]
    runtimes: list[str]
    verify_seconds: float = 0.0

    def path(self, rel: str) -> Path:
        return safe_path(self.folder, rel, "file")

    def task(self, name: str) -> TaskInfo:
        if name not in self.tasks:
            raise BundleError(f"{self.folder}: no task '{name}' (it has: "
                              f"{', '.join(self.tasks)})")
        return self.tasks[name]


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    if not path.is_file():
        raise BundleError(f"{path}: not found; is {folder} a bundle written by `cli.py export`?")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: not valid JSON ({e}); re-export the bundle") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: not a palkit bundle manifest (format "
                          f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != VERSION:
        raise BundleError(f"{path}: bundle version {manifest.get('version')!r} is not supported "
                          f"(this palkit reads version {VERSION}); re-export with this palkit")
    return manifest


def load_bundle(folder: str | Path, verify: bool = True) -> Bundle:
    """Parse and check a bundle: paths, listed files, sizes, SHA-256s, trunk of every task."""
    folder = Path(folder)
    t0 = time.perf_counter()
    m = read_manifest(folder)
    where = folder / "manifest.json"
    try:
        files = m["files"]
        trunk_sha = m["trunk"]["sha256"]
        runtimes = [r for r in RUNTIMES if r in m["runtimes"]]
        raw_tasks = m["tasks"]
        vocab = m["tokenizer"]["vocab_file"]
    except (KeyError, TypeError) as e:
        raise BundleError(f"{where}: missing key {e}; re-export the bundle") from None
    if not runtimes:
        raise BundleError(f"{where}: names no runtime; re-export the bundle")
    needed = {vocab: "tokenizer"}
    rt_keys = {"executorch": "trunk_data", "onnxruntime": "trunk_model"}
    for r in runtimes:
        needed[m["runtimes"][r][rt_keys[r]]] = f"runtimes.{r}"
    tasks = {}
    for t in raw_tasks:
        try:
            info = TaskInfo(t["name"], t["kind"], t.get("labels"), t.get("score_range"),
                            int(t["num_outputs"]), dict(t["files"]))
        except (KeyError, TypeError, ValueError) as e:
            raise BundleError(f"{where}: a task entry lacks {e}; re-export the bundle") from None
        if info.kind not in TASK_KINDS:
            raise BundleError(f"{where}: task '{info.name}' has unknown kind '{info.kind}'")
        if t.get("trunk_sha256") != trunk_sha:
            raise BundleError(f"{where}: task '{info.name}' was built against trunk "
                              f"{str(t.get('trunk_sha256'))[:12]}…, but this bundle's trunk is "
                              f"{str(trunk_sha)[:12]}…; re-export it with `cli.py export RUN "
                              f"--adapter {info.name} --out {folder}` from this trunk's run")
        for r in runtimes:
            if r not in info.files:
                raise BundleError(f"{where}: task '{info.name}' has no {r} file")
            needed[info.files[r]] = f"task '{info.name}'"
        tasks[info.name] = info
    program = m["runtimes"].get("executorch", {}).get("all_tasks")
    if program is not None:
        unknown = [t for t in program.get("tasks", []) if t not in tasks]
        if unknown or not program.get("tasks"):
            raise BundleError(f"{where}: runtimes.executorch.all_tasks names tasks {unknown or '[]'} "
                              "that the bundle lacks; re-export the bundle")
        needed[program.get("file")] = "runtimes.executorch.all_tasks"
    for rel, owner in needed.items():
        full = safe_path(folder, rel, owner)
        if rel not in files:
            raise BundleError(f"{where}: {owner} names '{rel}', which is not listed under "
                              "'files'; re-export the bundle")
        if not full.is_file():
            raise BundleError(f"{full}: missing ({owner}); copy the whole bundle folder again "
                              "or re-export it")
        if verify:
            digest, size = sha256_bytes_of(full)
            want = files[rel]
            if size != want.get("bytes"):
                raise BundleError(f"{full}: {size} bytes, manifest says {want.get('bytes')} "
                                  "(truncated or replaced); copy the bundle again or re-export it")
            if digest != want.get("sha256"):
                raise BundleError(f"{full}: SHA-256 differs from the manifest (corrupt or "
                                  "swapped file); copy the bundle again or re-export it")
    return Bundle(folder, m, tasks, runtimes, time.perf_counter() - t0)


# ---- tokenizer -------------------------------------------------------------------------------

class Tokenizer:
    """The HF fast BERT tokenizer built from the bundle's vocab.txt and manifest settings."""

    def __init__(self, bundle: Bundle):
        from transformers import BertTokenizerFast

        t = bundle.manifest["tokenizer"]
        self.max_length = int(t["max_length"])
        # transformers 5 takes the vocabulary as `vocab`; `vocab_file` is silently ignored
        # there (it builds a vocabulary of special tokens only).
        self.tok = BertTokenizerFast(
            vocab=str(bundle.path(t["vocab_file"])), do_lower_case=bool(t["lowercase"]),
            strip_accents=bool(t["strip_accents"]), cls_token=t["cls_token"],
            sep_token=t["sep_token"], pad_token=t["pad_token"], unk_token=t["unk_token"],
            mask_token=t.get("mask_token", "[MASK]"))

    def __call__(self, text: str, pair: str | None = None,
                 warn: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for label, s in (("text", text), ("second text", pair)):
            if s is not None and (not isinstance(s, str) or not s.strip()):
                raise BundleError(f"the {label} is empty; give some words to classify")
            if s is not None:
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError as e:  # undecodable bytes arrive as lone surrogates
                    raise BundleError(f"the {label} is not valid UTF-8 (at character "
                                      f"{e.start}); pass UTF-8 text") from None
        full = self.tok(text, pair, truncation=False)["input_ids"]
        enc = self.tok(text, pair, truncation="longest_first", max_length=self.max_length,
                       return_token_type_ids=True)
        if warn and len(full) > self.max_length:
            print(f"warning: input is {len(full)} tokens; truncated to the bundle's max length "
                  f"{self.max_length}", file=sys.stderr)
        ids = np.asarray([enc["input_ids"]], dtype=np.int64)
        return ids, np.ones_like(ids), np.asarray([enc["token_type_ids"]], dtype=np.int64)


# ---- engines ---------------------------------------------------------------------------------

def set_executorch_threads(n: int) -> None:
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    _unsafe_reset_threadpool(n)


class _ExecuTorch:
    """Per-task programs that share trunk.ptd; each program is loaded once, then kept."""

    def __init__(self, bundle: Bundle, threads: int | None):
        import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels)
        from executorch.runtime import Runtime

        if threads:
            set_executorch_threads(threads)
        self.bundle = bundle
        self.runtime = Runtime.get()
        self.trunk = bundle.path(bundle.manifest["runtimes"]["executorch"]["trunk_data"])
        self.methods: dict[str, Any] = {}

    def _method(self, key: str, rel: str) -> Any:
        if key not in self.methods:
            pte = self.bundle.path(rel)
            try:
                program = self.runtime.load_program(str(pte), data_path=str(self.trunk))
                self.methods[key] = program.load_method("forward")
            except Exception as e:  # the pybindings raise RuntimeError with an error code
                raise BundleError(f"{pte}: ExecuTorch cannot load it with {self.trunk.name} "
                                  f"({e}); re-export the bundle") from None
        return self.methods[key]

    def select(self, task: TaskInfo) -> None:
        self.current = self._method(task.name, task.files["executorch"])

    def run(self, task: TaskInfo, ids, mask, types) -> np.ndarray:
        import torch
        out = self.current.execute([torch.from_numpy(ids), torch.from_numpy(mask),
                                    torch.from_numpy(types)])[0]
        return out.numpy()[0, : task.num_outputs]

    def run_all(self, ids, mask, types) -> dict[str, np.ndarray]:
        """The bundle's all-tasks program: every task on this one input, trunk loaded once."""
        import torch
        program = self.bundle.manifest["runtimes"]["executorch"]["all_tasks"]
        method = self._method(ALL_TASKS_KEY, program["file"])
        outs = method.execute([torch.from_numpy(ids), torch.from_numpy(mask),
                               torch.from_numpy(types)])
        return {t: o.numpy()[0, : self.bundle.tasks[t].num_outputs]
                for t, o in zip(program["tasks"], outs)}


class _OnnxRuntime:
    """One session on trunk.onnx; each task is a LoraAdapter applied through RunOptions."""

    def __init__(self, bundle: Bundle, threads: int | None):
        import onnxruntime as ort

        self.ort = ort
        self.bundle = bundle
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # overridable initializers are intended: no warning per input
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        trunk = bundle.path(bundle.manifest["runtimes"]["onnxruntime"]["trunk_model"])
        try:
            self.session = ort.InferenceSession(str(trunk), opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:
            raise BundleError(f"{trunk}: ONNX Runtime cannot load it ({e}); re-export") from None
        self.adapters: dict[str, Any] = {}

    def select(self, task: TaskInfo) -> None:
        if task.name not in self.adapters:
            path = self.bundle.path(task.files["onnxruntime"])
            adapter = self.ort.LoraAdapter()
            try:
                adapter.Load(str(path))
            except Exception as e:
                raise BundleError(f"{path}: not a readable .onnx_adapter ({e}); re-export "
                                  "the bundle") from None
            options = self.ort.RunOptions()
            options.add_active_adapter(adapter)
            self.adapters[task.name] = (adapter, options)
        self.current = self.adapters[task.name][1]

    def run(self, task: TaskInfo, ids, mask, types) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.session.run(["logits"], feed, self.current)[0][0, : task.num_outputs]


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
    load_ms: float = 0.0
    swaps: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.runtime:
            self.runtime = self.bundle.runtimes[0]
        if self.runtime not in self.bundle.runtimes:
            raise BundleError(f"{self.bundle.folder}: exported without {self.runtime} (it has "
                              f"{', '.join(self.bundle.runtimes)}); use --runtime "
                              f"{self.bundle.runtimes[0]} or re-export with that target")
        t0 = time.perf_counter()
        self.tokenizer = Tokenizer(self.bundle)
        cls = _ExecuTorch if self.runtime == "executorch" else _OnnxRuntime
        self.impl = cls(self.bundle, self.threads)
        self.load_ms = (time.perf_counter() - t0) * 1000
        self.lock = threading.Lock()
        self.active: str | None = None

    def swap(self, task: str) -> float:
        """Make `task` current; returns milliseconds (first swap loads its adapter)."""
        info = self.bundle.task(task)
        t0 = time.perf_counter()
        self.impl.select(info)
        ms = (time.perf_counter() - t0) * 1000
        self.swaps.setdefault(task, ms)
        self.active = task
        return ms

    def run_ids(self, task: str, ids, mask, types) -> tuple[np.ndarray, float, float]:
        info = self.bundle.task(task)
        with self.lock:
            swap_ms = self.swap(task) if self.active != task else 0.0
            t0 = time.perf_counter()
            out = np.array(self.impl.run(info, ids, mask, types), dtype=np.float32)
            return out, (time.perf_counter() - t0) * 1000, swap_ms

    def all_tasks_program(self) -> list[str] | None:
        """The tasks of the bundle's all-tasks program on this runtime, or None without one."""
        program = self.bundle.manifest["runtimes"][self.runtime].get("all_tasks")
        return list(program["tasks"]) if program else None

    def run_all_ids(self, ids, mask, types) -> tuple[dict[str, np.ndarray], float]:
        """Every task of the all-tasks program on one input, in one call; returns outputs, ms."""
        if self.all_tasks_program() is None:
            raise BundleError(f"{self.bundle.folder}: no all-tasks program for {self.runtime} "
                              "(ExecuTorch bundles of several tasks have one); run the tasks "
                              "one by one")
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

    def predict_all(self, text: str, pair: str | None = None) -> list[Prediction]:
        """Every task on one input (one text for single-text tasks, two for pair tasks)."""
        for info in self.bundle.tasks.values():
            if info.is_pair and pair is None:
                raise BundleError(f"task '{info.name}' ({info.kind}) needs two texts; give a "
                                  "second text, or pick one task with --task")
        program = self.all_tasks_program()
        same_input = all(i.is_pair == (pair is not None) for i in self.bundle.tasks.values())
        if program == list(self.bundle.tasks) and same_input:
            # Every task reads the same token ids: one call of the all-tasks program.
            ids, mask, types = self.tokenizer(text, pair)
            outs, ms = self.run_all_ids(ids, mask, types)
            return [make_prediction(self.bundle.tasks[t], outs[t], ids.shape[1], ms, 0.0)
                    for t in program]
        return [self.predict(name, text, pair if info.is_pair else None)
                for name, info in self.bundle.tasks.items()]


def make_prediction(info: TaskInfo, out: np.ndarray, tokens: int, ms: float,
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


# ---- evaluation ------------------------------------------------------------------------------

def evaluate_bundle(bundle: str | Path, data_dir: Path, split: str,
                    max_examples: int | None = None, runtime: str | None = None) -> dict[str, Any]:
    """Metrics of the exported artifacts as run by the runtime (same keys as evaluate_model_dir)."""
    import torch

    from trainer.data import read_examples
    from trainer.metrics import average_score, task_metrics
    from trainer.tasks import TaskSpec

    b = load_bundle(bundle)
    engine = Engine(b, runtime or "")
    specs, metrics = [], {}
    for entry in b.manifest["tasks"]:
        spec = TaskSpec.from_dict(entry["spec"])
        if split not in spec.files:
            continue
        examples = read_examples(spec, data_dir, split)[:max_examples]
        preds = []
        for ex in examples:
            ids, mask, types = engine.tokenizer(*ex.texts, warn=False)
            out, _, _ = engine.run_ids(spec.name, ids, mask, types)
            preds.append(float(out[0]) if spec.is_regression else float(out.argmax()))
        gold = torch.tensor([e.label for e in examples], dtype=torch.float32)
        metrics.update(task_metrics(spec, torch.tensor(preds), gold))
        specs.append(spec)
    if not specs:
        raise BundleError(f"{b.folder}: no task in this bundle has a '{split}' split")
    metrics["avg"] = average_score(specs, metrics)
    return {"split": split, "tasks": [s.name for s in specs], "runtime": engine.runtime,
            "bundle": str(b.folder), "trunk_sha256": b.manifest["trunk"]["sha256"],
            "max_len": engine.tokenizer.max_length, **metrics}
