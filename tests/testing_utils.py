"""What the tests share that is not a fixture: the repository's paths, the one policy for tools
a test needs (a JDK, a C++ compiler: skip with the reason), tiny models, data and runs, and
synthetic bench files. Test modules import from here, never from one another; fixtures are in
conftest.py."""
from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertModel, BertTokenizerFast

from palkit.android_demo.host import native_host
from palkit.core.fileio import KILL_ENV
from palkit.runtime.signing import TRUST_KEY_ENV
from palkit.trainer.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
ANDROID_DEMO = REPO / "android_demo"
JDK_HINT = "a JDK (17+), e.g. `apt-get install openjdk-17-jdk-headless`"


def tool(name: str, needed_for: str) -> str:
    """A program from PATH; without it the test skips, saying what it is needed for (the one
    policy for every tool a test needs; palkit itself needs none of them)."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"`{name}` not found on PATH: {needed_for}")
    return path


def jdk_tool(name: str) -> str:
    """`javac` or `java`: the app's Java tests need a JDK."""
    return tool(name, f"the app's Java tests need {JDK_HINT}")


def native_toolchain(arch: str = native_host.HOST_ARCH) -> None:
    """Skip, with the reason, where the app's native path cannot be built for `arch` (no C++
    compiler or JDK; for aarch64 also the cross tools, qemu and the fetched SDK)."""
    reason = native_host.missing_toolchain(arch)
    if reason:
        pytest.skip(reason)


# A child process that has run this long has hung: a guard against waiting forever, far above
# what any test's work takes on a loaded machine, so no outcome depends on speed.
HANG_GUARD_S = 1800


WORDS = ("good great fine bad awful terrible movie film plot actor the a is was and not very "
         "what how why do i can you best way to learn cook run dog cat man woman play plays "
         "playing on in grass with ball two people are is".split())


def write_vocab(path: Path) -> None:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,!?'")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS)), *letters,
              *[f"##{c}" for c in letters]]
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n")


def make_tiny_bert(folder: Path, seed: int = 0, layers: int = 2) -> Path:
    """A random 2-layer BERT (hidden 32, 4 heads) with its tokenizer, saved like a hub folder."""
    folder.mkdir(parents=True, exist_ok=True)
    write_vocab(folder / "vocab.txt")
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    assert tokenizer("the film")["input_ids"][1] != tokenizer.unk_token_id, "vocabulary not loaded"
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len((folder / "vocab.txt").read_text().split("\n")) - 1,
                        hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    return folder


def _write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["", "id", *header])
        for i, row in enumerate(rows):
            w.writerow([str(i), f"id{i:05d}", *row])


def make_tiny_data(root: Path, n: int = 48, seed: int = 0) -> Path:
    """Learnable toy versions of sst / quora / sts / cfimdb in the minBERT layout."""
    rng = random.Random(seed)
    pos, neg = ["good", "great", "fine"], ["bad", "awful", "terrible"]

    def sentence(word: str) -> str:
        return f"the {rng.choice(['movie', 'film', 'plot'])} was {word}"

    def sst_rows(k: int) -> list[list[str]]:
        rows = []
        for _ in range(k):
            label = rng.randrange(5)
            word = rng.choice(neg if label < 2 else pos if label > 2 else ["fine"])
            rows.append([sentence(word), str(label)])
        return rows

    def quora_rows(k: int) -> list[list[str]]:
        rows = []
        for _ in range(k):
            a = f"how can i learn to {rng.choice(['cook', 'run', 'play'])}"
            dup = rng.random() < 0.5
            b = a if dup else f"why do {rng.choice(['dogs', 'cats'])} play"
            rows.append([a, b, "1.0" if dup else "0.0"])
        return rows

    def sts_rows(k: int) -> list[list[str]]:
        rows = []
        for _ in range(k):
            a = f"two people are playing with a {rng.choice(['ball', 'dog'])}"
            score = round(rng.uniform(0, 5), 1)
            b = a if score > 2.5 else f"a man is {rng.choice(['running', 'cooking'])}"
            rows.append([a, b, str(score)])
        return rows

    def imdb_rows(k: int) -> list[list[str]]:
        rows = []
        for _ in range(k):
            label = rng.randrange(2)
            rows.append([sentence(rng.choice(pos if label else neg)) + " and the actor was fine",
                         str(label)])
        return rows

    for split, k in (("train", n), ("dev", n // 2), ("test", n // 2)):
        _write_tsv(root / "sst" / f"ids-sst-{split}.csv", ["sentence", "sentiment"], sst_rows(k))
        _write_tsv(root / "quora" / f"quora-{split}.csv",
                   ["sentence1", "sentence2", "is_duplicate"], quora_rows(k))
        _write_tsv(root / "sts" / f"sts-{split}.csv",
                   ["sentence1", "sentence2", "similarity"], sts_rows(k))
    for split, k in (("train", n), ("dev", n // 2)):
        _write_tsv(root / "cfimdb" / f"ids-cfimdb-{split}.csv", ["sentence", "sentiment"],
                   imdb_rows(k))
    for split, k in (("train", n), ("dev", n // 2), ("test", n // 2)):
        write_tiny_atis(root / "atis" / f"atis-{split}.tsv", k, rng)
    return root


ATIS_CITIES = ("boston", "denver", "new york", "dallas")


def write_tiny_atis(path: Path, k: int, rng: random.Random) -> None:
    """A learnable toy of ATIS's layout (unquoted TSV: id, words, slots, intent): a fare, a
    flight or both; the cities' BIO spans (two-word "new york" takes an I- tag)."""
    rows = []
    for i in range(k):
        origin, destination = rng.sample(ATIS_CITIES, 2)
        intent = rng.choice(["atis_flight", "atis_airfare", "atis_flight;atis_airfare"])
        ask = {"atis_flight": ["flights"], "atis_airfare": ["fares"]}.get(intent, ["flights", "and", "fares"])
        words, tags = ["show", *ask, "from"], ["O"] * (len(ask) + 2)
        for city, slot in ((origin, "fromloc"), (destination, "toloc")):
            parts = city.split()
            words += parts
            tags += [f"B-{slot}"] + [f"I-{slot}"] * (len(parts) - 1)
            if slot == "fromloc":
                words, tags = words + ["to"], tags + ["O"]
        rows.append(f"{i}\t{' '.join(words)}\t{' '.join(tags)}\t{intent}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id\twords\tslots\tintent\n" + "\n".join(rows) + "\n")


def poison_loss_at_call(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Make the training loop's `call`-th task loss NaN (the trainer must stop on it)."""
    import palkit.trainer.train as tt
    real, calls = tt.task_loss, {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == call else loss

    monkeypatch.setattr(tt, "task_loss", poisoned)


def tiny_config(base: Path, data: Path, out: Path, **overrides) -> TrainConfig:
    """A run that takes seconds: 2 epochs of 4 steps of batch 8 on the tiny BERT."""
    values = dict(base_model=str(base), data_dir=str(data), out=str(out), epochs=2,
                  steps_per_epoch=4, batch_size=8, max_len=32, lr=1e-3, pal_size=8, pal_heads=2,
                  eval_batch_size=16, device="cpu", bad_rows="stop")
    values.update(overrides)
    return TrainConfig(**values)


def killed_at(point: str, target: Callable[..., Any], *args: Any) -> None:
    """Run target(*args) in a forked process with PALKIT_KILL_AT=point (core/fileio.py's
    kill_point): the process must die there, by SIGKILL, as a `kill -9` would leave it."""
    from palkit.core.fileio import KILL_ENV

    def victim() -> None:
        os.environ[KILL_ENV] = point
        target(*args)

    proc = multiprocessing.get_context("fork").Process(target=victim)
    proc.start()
    proc.join(timeout=HANG_GUARD_S)
    if proc.is_alive():
        proc.kill()
    assert proc.exitcode == -signal.SIGKILL, f"not killed at {point} (exit code {proc.exitcode})"


def run_tree(root: Path) -> dict[str, str]:
    """Every path under `root` -> what it holds: a link's target (links are not followed), a
    file's SHA-256, or for JSON the content less what differs between two equal runs: wall-clock
    times and the folder's own path (replaced by "ROOT")."""
    tree = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                tree[key] = "-> " + os.readlink(path)
            elif path.is_dir():
                tree[key] = "folder"
            elif path.suffix in (".json", ".jsonl"):
                text = path.read_text().replace(str(root), "ROOT")
                tree[key] = json.dumps([_untimed(json.loads(line)) for line in text.splitlines()
                                        if line.strip()] if path.suffix == ".jsonl"
                                       else _untimed(json.loads(text)), sort_keys=True)
            else:
                tree[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return tree


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("elapsed_s", "wall_time_s")}
    return value


def assert_agrees_with_last(run: Path) -> None:
    """What a reader of RUN/metrics.jsonl and RUN/model sees is what RUN/last says: one metrics
    line per finished epoch, and the best model it names (or neither before a checkpoint)."""
    if not (run / "last").exists():
        assert not (run / "metrics.jsonl").exists() and not (run / "model").exists()
        return
    state = json.loads((run / "last" / "state.json").read_text())
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["global_epoch"] for x in lines] == list(range(1, state["global_epoch"] + 1))
    if state["best"] is None:
        assert not (run / "model").exists()
    else:
        summary = json.loads((run / "model" / "summary.json").read_text())
        assert (summary["epoch"], summary["avg"]) == (state["best"]["epoch"], state["best"]["avg"])


def tensors_of(model_dir: Path) -> dict[str, torch.Tensor]:
    out = {f"trunk.{k}": v for k, v in load_file(model_dir / "trunk" / "model.safetensors").items()}
    for task in sorted((model_dir / "tasks").iterdir()):
        out.update({f"{task.name}.{k}": v for k, v in
                    load_file(task / "adapter.safetensors").items()})
    return out


def train_cli(args: list[str], kill_at: str | None = None) -> subprocess.Popen:
    """`palkit train ARGS` in a child process; with `kill_at`, PALKIT_KILL_AT names where it dies."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    if kill_at:
        env[KILL_ENV] = kill_at
    return subprocess.Popen([sys.executable, str(REPO / "cli.py"), "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> int:
    """Wait for a train_cli process (reading its stderr, so a full pipe cannot stall it); its
    exit code, with stderr shown when the test fails."""
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    print(err[-3000:])
    return proc.returncode


BENCH_TASKS = ("sst", "quora", "sts")


def bench_rows(subject, runtime, p50_task, p50_all=None, prec="int8"):
    rows = []
    for threads in (1, 2):
        for seq in (32, 128):
            scale = (seq / 128) / threads
            configs = [f"task:{t}" for t in BENCH_TASKS] + (["all_tasks"] if p50_all else [])
            for c in configs:
                p50 = (p50_all if c == "all_tasks" else p50_task) * scale
                rows.append({"subject": subject, "runtime": runtime, "config": c,
                             "threads": threads, "seq_len": seq, "p50_ms": p50,
                             "p90_ms": p50 * 1.2, "runs": 30, "precision": prec,
                             "id": f"latency:{subject}:{c}:t{threads}:s{seq}",
                             "matmul_flops": 2_870_000_000 * seq // 128,
                             **({"all_tasks_mode": "program"} if c == "all_tasks" else {})})
    return rows


def bench_subject(role, runtime, prec, label, sizes, mem_one, mem_all, swap, pal_layers=(),
             model_dirs=None):
    """A bench file's subject; `pal_layers`: the layer indices of a 6-layer trunk."""
    return {"role": role, "runtime": runtime, "precision": prec, "label": label,
            "pal_layers": list(pal_layers), "num_layers": 6, "tasks": list(BENCH_TASKS),
            "bundle": sizes,
            "load_ms": {runtime: 50.0}, "first_result_ms": {runtime: 62.0},
            "swap_ms": {runtime: swap}, "fp32_model_dirs": model_dirs or {},
            "memory_rss_bytes": {"after_import": 100, "model_one_task": mem_one,
                                 "model_all_tasks": mem_all}}


def host_bench(tmp: Path) -> dict:
    pal_run, sep_run = tmp / "runs" / "pals", tmp / "runs" / "separate"
    subjects = {
        "pal/executorch": bench_subject("pal", "executorch", "int8", "pal (executorch, int8)",
                                   {"trunk_bytes": 22_000_000,
                                    "adapter_bytes": {t: 400_000 for t in BENCH_TASKS},
                                    "total_bytes": 23_200_000}, 30_000_000, 33_000_000, 4.0,
                                   range(6), {t: str(pal_run / "model") for t in BENCH_TASKS}),
        "pal-top/executorch": bench_subject("pal", "executorch", "int8", "top (executorch, int8)",
                                       {"trunk_bytes": 22_000_000,
                                        "adapter_bytes": {t: 200_000 for t in BENCH_TASKS},
                                        "total_bytes": 22_600_000}, 30_000_000, 32_000_000, 3.0,
                                       (3, 4, 5)),
        "separate/executorch/int8": bench_subject(
            "separate", "executorch", "int8", "separate models (executorch, int8)",
            {"trunk_bytes": {t: 22_000_000 for t in BENCH_TASKS},
             "per_model_bytes": {t: 22_100_000 for t in BENCH_TASKS}, "total_bytes": 66_300_000},
            30_000_000, 90_000_000, 40.0),
        "peer/ort-int8": bench_subject("peer", "onnxruntime", "int8", "ORT int8 (Optimum recipe)",
                                  {"per_model_bytes": {t: 23_000_000 for t in BENCH_TASKS},
                                   "total_bytes": 69_000_000}, 40_000_000, 120_000_000, 30.0),
        "peer/torch": bench_subject("peer", "torch", "fp32", "PyTorch eager fp32",
                               {"per_model_bytes": {t: 91_000_000 for t in BENCH_TASKS},
                                "total_bytes": 273_000_000}, 100_000_000, 300_000_000, 200.0),
    }
    results = (bench_rows("pal/executorch", "executorch", 13.0, 28.0)
               + bench_rows("pal-top/executorch", "executorch", 12.5, 20.0)
               + bench_rows("separate/executorch/int8", "executorch", 12.0, 36.0)
               + bench_rows("peer/ort-int8", "onnxruntime", 14.8, 44.4)
               + bench_rows("peer/torch", "torch", 43.8, 131.4, "fp32"))
    return {
        "schema": "palkit-bench", "version": 1,
        "machine": {"kind": "host", "model": "Test CPU 9000", "cores_logical": 2, "os": "Linux"},
        "bundle": {}, "results": results, "load_ms": {}, "swap_ms": {}, "memory_rss_bytes": {},
        "subjects": subjects,
        "ceiling": {"1": {"fp32_gflops_best": 100.0, "int8_gops_best": 250.0},
                    "2": {"fp32_gflops_best": 190.0, "int8_gops_best": 480.0}},
        "accuracy": {
            "pal/executorch": {"dev": {"avg": 0.700}, "test": {"avg": 0.690}},
            "fp32:pals": {"dev": {"avg": 0.705}, "test": {"avg": 0.694},
                          "run": str(pal_run), "kind": "joint", "optimizer_steps": 400},
            "fp32:separate": {"dev": {"avg": 0.702}, "test": {"avg": 0.698},
                              "run": str(sep_run), "kind": "separate", "optimizer_steps": 1200},
        },
        "notes": ["a note from bench"],
    }


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


# fp32 across architectures: XNNPACK's NEON and AVX kernels sum in another order. Measured, in
# ulp of the largest logit: 1-2 on MiniLM; 6 on the hybrid test bundle, whose logits (~0.007)
# come out of much larger sums. 16 leaves room; a wrong kernel is off by orders of magnitude more.
FP32_ULPS = 16


# int8 across architectures: the dynamic-int8 kernels (x86's and ARM's XNNPACK/KleidiAI paths)
# quantize activations and accumulate differently. On the tiny int8 test bundles they come out
# identical (tests/test_task_files_int8.py prints it); on the Quickstart's trained MiniLM a logit
# moved by up to 7e-2 over 150 dev examples a task, the order of int8's own distance from fp32
# there (results/arm64-int8-check-shared.md), which verify-arch judges by each task's metric.
# A kernel computing wrong (qemu 7.2's `max` CPU) moved MiniLM's SST-5 logits by 0.89 and the
# argmax. On these tiny bundles 1e-3 of the largest logit catches any change in the arithmetic.
INT8_RELATIVE = 1e-3


def assert_logits_match(build, logits: list[float], expected: np.ndarray,
                        quant: str = "fp32") -> None:
    """Logits of the JNI on `build`'s architecture against the Python runtime (this host)."""
    actual, largest = np.float32(logits), np.float32(np.abs(expected).max())
    if build.arch == native_host.HOST_ARCH:
        # Same program, same kernels: the C++ Module and the Python bindings agree exactly.
        np.testing.assert_array_equal(actual, expected)
    elif quant == "fp32":
        np.testing.assert_allclose(actual, expected, rtol=0, atol=FP32_ULPS * np.spacing(largest))
    else:
        np.testing.assert_allclose(actual, expected, rtol=0, atol=INT8_RELATIVE * largest)


def harness(build, *args: str, trust_key: Path | None = None) -> subprocess.CompletedProcess:
    """The harness in a child JVM; `trust_key` is given as palkit gives it (--trust-key), and
    $PALKIT_TRUST_KEY is left unset: the harness reads no environment."""
    env = {k: v for k, v in os.environ.items() if k != TRUST_KEY_ENV}
    return subprocess.run(build.command(*map(str, args), trust_key=trust_key), capture_output=True,
                          text=True, timeout=HANG_GUARD_S, env=env)
