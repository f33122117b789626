"""Shared fixtures: a tiny random BERT with a real WordPiece tokenizer, tiny task data, tiny runs.

Nothing here touches the network or ../shared/data.
"""
from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from trainer.config import TrainConfig

# A child process that has run this long has hung: a guard against waiting forever, far above
# what any test's work takes on a loaded machine, so no outcome depends on speed.
HANG_GUARD_S = 1800

# Tiny models run fastest on one thread, and the tests then leave a core to whatever else runs.
torch.set_num_threads(1)

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
    return root


def poison_loss_at_call(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Make the training loop's `call`-th task loss NaN (the trainer must stop on it)."""
    import trainer.train as tt
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


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("tiny-data"))


@pytest.fixture(scope="session")
def tiny_pal_run(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path, tiny_data: Path) -> Path:
    """A finished PAL run on sst/quora/sts, shared by tests that only read it."""
    from trainer.train import train
    out = tmp_path_factory.mktemp("runs") / "pals"
    return train(tiny_config(tiny_bert, tiny_data, out))


@pytest.fixture(scope="session")
def et_fp32(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 bundle for both runtimes with sst (one text) and sts (a pair): two task programs
    over one trunk.ptd plus the all-tasks program. Read-only: tests that change it copy it."""
    from export.bundle import export_run
    out = tmp_path_factory.mktemp("b") / "et-fp32"
    export_run(tiny_pal_run, out, target="android", quant="fp32", tasks=["sst", "sts"],
               data_dir=tiny_data, log=lambda *a: None)
    return out


@pytest.fixture(scope="session")
def hybrid_run(tiny_pal_run: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PAL run (PALs in every layer) with tasks added later: cfimdb and dup (a described pair
    task) as heads only, para (the same pair task) with PALs in the top layer."""
    import cli
    run = tmp_path_factory.mktemp("hybrid") / "run"
    shutil.copytree(tiny_pal_run, run, symlinks=True)
    short = ["--data-dir", str(tiny_data), "--epochs", "1", "--steps-per-epoch", "2",
             "--batch-size", "8"]
    pair = ["--kind", "pair_classification", "--text-columns", "sentence1,sentence2",
            "--label-column", "is_duplicate", "--labels", "no,yes",
            "--train-file", "quora/quora-train.csv", "--dev-file", "quora/quora-dev.csv"]
    for args in (["--task", "cfimdb", "--adapter", "head"],
                 ["--task", "dup", "--adapter", "head", *pair],
                 ["--task", "para", "--adapter", "pal", "--pal-layers", "top-1", *pair]):
        assert cli.main(["add-task", str(run), *args, *short]) == 0
    return run


@pytest.fixture(scope="session")
def hybrid_bundle(hybrid_run: Path, tiny_data: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An fp32 ExecuTorch bundle of the hybrid run: sst and quora (the run's PALs), cfimdb and dup
    (heads only), para (PALs on top). Read-only."""
    from export.bundle import export_run
    out = tmp_path_factory.mktemp("b") / "hybrid"
    export_run(hybrid_run, out, target="executorch", quant="fp32",
               tasks=["sst", "quora", "cfimdb", "dup", "para"], data_dir=tiny_data,
               log=lambda *a: None)
    return out


@pytest.fixture(scope="module")
def host_build():
    """The app's JNI built for this host against the executorch wheel's C++ SDK (skipped, with
    the reason, without a C++ compiler or a JDK)."""
    from bench.native import native_host

    reason = native_host().missing_toolchain()
    if reason:
        pytest.skip(reason)
    return native_host().build()


def killed_at(point: str, target: Callable[..., Any], *args: Any) -> None:
    """Run target(*args) in a forked process with PALKIT_KILL_AT=point (trainer/fileio.py's
    kill_point): the process must die there, by SIGKILL, as a `kill -9` would leave it."""
    from trainer.fileio import KILL_ENV

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
