"""The run-directory contract: what training writes and everything downstream reads.

    RUN/
      config.json              the resolved training config
      metrics.jsonl            one JSON line per finished epoch
      model -> best-NNNN/      the best checkpoint so far (a relative symlink, swapped atomically)
        trunk/                 config.json + model.safetensors + tokenizer files (transformers loads it)
        tasks/<name>/          adapter.safetensors (PAL + head) + adapter_config.json
        summary.json           epoch, dev metrics, parameter counts
      last -> ckpt-NNNN/       the newest resumable checkpoint: model files + optimizer + state
      models/<task>/           (--mode separate) one complete single-task run per task

Only safetensors and JSON are written or read: nothing here can execute code on load.
Every file and directory is written under a temporary name and renamed into place, and the
symlinks are replaced in one rename, so a crash or a full disk never leaves a half checkpoint
where a reader looks.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertModel

from trainer.model import PalBert, PalConfig
from trainer.errors import PalkitError
from trainer.tasks import TaskSpec

FORMAT_VERSION = 1
TRUNK_WEIGHTS = "model.safetensors"


class CheckpointError(PalkitError, ValueError):
    """A run directory or checkpoint is missing, incomplete or incompatible."""


# ---- small atomic-IO helpers ---------------------------------------------------------------

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and rename, so readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be shared
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: Path) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def point_symlink(link: Path, target_name: str) -> None:
    """Make `link` point at the sibling `target_name`, replacing any old link in one rename."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target_name, tmp)
    os.replace(tmp, link)


def publish_dir(build: Path, final: Path) -> None:
    """Rename a fully written temporary directory to its final name."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(build, final)


# ---- model files ---------------------------------------------------------------------------

def save_model(model: PalBert, tokenizer, out: Path, trunk_file: Path | None = None) -> str:
    """Write trunk/ and tasks/<name>/ into `out`; return the trunk's SHA-256.

    `trunk_file`, when given, is an existing trunk model.safetensors to copy byte for byte
    (frozen-trunk training must not even re-serialise it).
    """
    trunk_dir = out / "trunk"
    trunk_dir.mkdir(parents=True, exist_ok=True)
    model.trunk.config.save_pretrained(trunk_dir)
    tokenizer.save_pretrained(trunk_dir)
    write_vocab(tokenizer, trunk_dir / "vocab.txt")
    weights = trunk_dir / TRUNK_WEIGHTS
    if trunk_file is not None:
        shutil.copyfile(trunk_file, weights)
    else:
        state = {k: v.detach().cpu().contiguous() for k, v in model.trunk.state_dict().items()}
        save_file(state, weights, metadata={"format": "pt"})
    trunk_sha = sha256_file(weights)
    for name in model.tasks:
        save_task(model, name, out / "tasks" / name, trunk_sha)
    return trunk_sha


def write_vocab(tokenizer, path: Path) -> None:
    """vocab.txt (one token per line, id = line number): what WordPiece readers off-Python need."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise CheckpointError("tokenizer vocabulary ids are not contiguous; cannot write vocab.txt")
    path.write_text("".join(f"{token}\n" for token, _ in by_id), encoding="utf-8")


def save_task(model: PalBert, name: str, out: Path, trunk_sha: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.task_parameters(name).items()}
    save_file(tensors, out / "adapter.safetensors", metadata={"format": "pt"})
    write_json(out / "adapter_config.json", {
        "format_version": FORMAT_VERSION,
        "task": model.tasks[name].to_dict(),
        "pal": model.pal.to_dict() if model.pal is not None else None,
        "trunk_sha256": trunk_sha,
        "hidden_size": model.trunk.config.hidden_size,
    })


def load_trunk(path: str | Path) -> tuple[BertModel, Any]:
    """A BERT trunk and its tokenizer from a folder or hub id (any BERT checkpoint)."""
    try:
        config = BertConfig.from_pretrained(str(path))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot load a BERT config from '{path}': {e}") from None
    if config.model_type != "bert":
        raise CheckpointError(f"'{path}' is a {config.model_type} model; palkit needs a BERT")
    trunk = BertModel.from_pretrained(str(path), config=config, add_pooling_layer=True,
                                      attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return trunk, tokenizer


def load_model(model_dir: Path, tasks: list[str] | None = None) -> tuple[PalBert, Any, str]:
    """Load model_dir/{trunk,tasks}; refuse adapters trained against another trunk."""
    model_dir = Path(model_dir)
    trunk_dir = model_dir / "trunk"
    if not (trunk_dir / TRUNK_WEIGHTS).is_file():
        raise CheckpointError(f"{trunk_dir / TRUNK_WEIGHTS}: not found; is {model_dir} a palkit "
                              "model folder (RUN/model)?")
    trunk_sha = sha256_file(trunk_dir / TRUNK_WEIGHTS)
    trunk, tokenizer = load_trunk(trunk_dir)
    names = tasks or sorted(p.name for p in (model_dir / "tasks").iterdir() if p.is_dir())
    configs = [read_task_config(model_dir / "tasks" / n, trunk_sha) for n in names]
    pals = {json.dumps(c["pal"], sort_keys=True) for c in configs}
    if len(pals) > 1:
        raise CheckpointError(f"{model_dir}: tasks were trained with different PAL shapes")
    pal_dict = configs[0]["pal"] if configs else None
    pal = PalConfig.from_dict(pal_dict) if pal_dict else None
    model = PalBert(trunk, [TaskSpec.from_dict(c["task"]) for c in configs], pal)
    for name in names:
        load_task_weights(model, name, model_dir / "tasks" / name / "adapter.safetensors")
    return model.eval(), tokenizer, trunk_sha


def read_task_config(task_dir: Path, trunk_sha: str) -> dict[str, Any]:
    cfg = read_json(task_dir / "adapter_config.json")
    if cfg.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{task_dir / 'adapter_config.json'}: format_version "
                              f"{cfg.get('format_version')} is not {FORMAT_VERSION}")
    if cfg.get("trunk_sha256") != trunk_sha:
        raise CheckpointError(f"{task_dir}: adapter was trained against trunk "
                              f"{str(cfg.get('trunk_sha256'))[:12]}…, not this trunk "
                              f"{trunk_sha[:12]}…; use the run it came from")
    return cfg


def load_task_weights(model: PalBert, name: str, path: Path) -> None:
    try:
        tensors = load_file(path)
    except (OSError, Exception) as e:  # safetensors raises its own error type on corruption
        raise CheckpointError(f"{path}: cannot read adapter weights ({e})") from None
    params = model.task_parameters(name)
    if set(tensors) != set(params):
        raise CheckpointError(f"{path}: tensors {sorted(set(tensors) ^ set(params))[:4]} do not "
                              "match the task's adapter shape")
    with torch.no_grad():
        for key, value in tensors.items():
            if params[key].shape != value.shape:
                raise CheckpointError(f"{path}: {key} has shape {tuple(value.shape)}, expected "
                                      f"{tuple(params[key].shape)}")
            params[key].copy_(value)


def resolve_model_dir(path: Path) -> Path:
    """Accept a run directory (uses RUN/model) or a model folder itself."""
    path = Path(path)
    if (path / "model" / "trunk").is_dir():
        return path / "model"
    if (path / "trunk").is_dir():
        return path
    raise CheckpointError(f"{path}: neither a run directory (RUN/model/trunk) nor a model folder "
                          "(trunk/ + tasks/); train one with `python cli.py train`")
