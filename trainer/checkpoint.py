"""The run-directory contract: what training writes and everything downstream reads.

    RUN/
      config.json              the resolved training config
      last -> ckpt-EEEE-SSSSSS/  the newest resumable checkpoint:
        trunk/ tasks/          the model at that step
        optimizer.safetensors  AdamW's state (its state_dict, keyed by parameter name) and the
                               torch RNG state (`__rng_state__`)
        state.json             the loop's position (TrainingState)
        metrics.jsonl          one JSON line per epoch finished by then
        best -> ../best-EEEE   the best model by then
      metrics.jsonl -> last/metrics.jsonl
      model -> last/best       the best model so far:
        trunk/                 config.json + model.safetensors + tokenizer files
        tasks/<name>/          adapter.safetensors (PAL + head) + adapter_config.json
        summary.json           epoch, dev metrics, parameter counts
      models/<task>/           (--mode separate) one complete single-task run per task

RUN/metrics.jsonl and RUN/model are fixed links through RUN/last, so moving `last` (one rename)
moves every file a reader opens to the next checkpoint at once: whatever the instant of a kill,
the metrics, the best model and the checkpoint agree, and `--resume` redoes exactly the work the
checkpoint does not hold. A best model is written as RUN/best-EEEE before the checkpoint that
names it; folders no link reaches are deleted after each checkpoint and on resume.

Only safetensors and JSON are read or written (nothing can execute code on load), each under a
temporary name put in place by core/fileio.py, so a full disk never leaves a half checkpoint
where a reader looks.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertModel

from palkit.core.errors import ConfigError, PalkitError
from palkit.core.fileio import (kill_point, point_symlink, remove_tree, replace_dir, sha256_file,
                                write_json, write_text, write_vocab)
from palkit.trainer.model import PalBert, PalConfig
from palkit.trainer.tasks import TaskSpec

FORMAT_VERSION = 1
TRUNK_WEIGHTS = "model.safetensors"
RNG_KEY = "__rng_state__"
# A hub id ("org/name" or "name"); anything else that does not exist is a missing folder.
HUB_ID = r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?"
# The run's files that resolve through RUN/last (see above).
RUN_LINKS = {"metrics.jsonl": "last/metrics.jsonl", "model": "last/best"}
# What tidy_run may delete: snapshots and the temporary names they are written under.
SNAPSHOT = r"(ckpt|best)-[\d-]+|\..+\.tmp"


class CheckpointError(PalkitError, ValueError):
    """A run directory or checkpoint is missing, incomplete or incompatible."""


def read_json(path: Path) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


# ---- model files ---------------------------------------------------------------------------

def save_model(model: PalBert, tokenizer, out: Path, trunk_file: Path | None = None) -> str:
    """Write trunk/ and tasks/<name>/ into `out`; return the trunk's SHA-256. `trunk_file` is
    a trunk model.safetensors to copy byte for byte (a frozen trunk must not be re-serialised)."""
    trunk_dir = out / "trunk"
    trunk_dir.mkdir(parents=True, exist_ok=True)
    model.trunk.config.save_pretrained(trunk_dir)
    # Saved as loaded: encoding leaves its truncation in tokenizer.json (and a tokenizer loaded
    # from that writes it into tokenizer_config.json), so a resumed run's files would differ.
    # Every encode call sets its own truncation, so dropping it here changes nothing else.
    tokenizer.backend_tokenizer.no_truncation()
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


def save_task(model: PalBert, name: str, out: Path, trunk_sha: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.task_parameters(name).items()}
    save_file(tensors, out / "adapter.safetensors", metadata={"format": "pt"})
    write_json(out / "adapter_config.json", {
        "format_version": FORMAT_VERSION,
        "task": model.tasks[name].to_dict(),
        "pal": pal.to_dict() if (pal := model.task_pal(name)) is not None else None,
        "trunk_sha256": trunk_sha,
        "hidden_size": model.trunk.config.hidden_size,
    })


def load_trunk(path: str | Path) -> tuple[BertModel, Any]:
    """A BERT trunk and its tokenizer from a folder or hub id (any BERT checkpoint)."""
    path = str(path)
    local = Path(path)
    if local.exists():
        check_bert_folder(local)
    elif not re.fullmatch(HUB_ID, path) or local.parent.name and local.parent.is_dir():
        # Not a hub id, or "runs/x" where runs/ is a local folder: a folder that is not there.
        raise CheckpointError(f"{path}: no such folder; give a BERT checkpoint folder "
                              "(config.json + model.safetensors) or a hub id such as "
                              "sentence-transformers/all-MiniLM-L6-v2")
    try:
        config = BertConfig.from_pretrained(path)
    except (OSError, ValueError) as e:  # transformers' and the hub's "cannot load" errors
        raise CheckpointError(f"cannot load a BERT config from '{path}': {first_line(e)}") from None
    if config.model_type != "bert":
        raise CheckpointError(f"'{path}' is a {config.model_type} model; palkit needs a BERT")
    try:
        trunk = BertModel.from_pretrained(path, config=config, add_pooling_layer=True,
                                          attn_implementation="eager")
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot load a BERT from '{path}': {first_line(e)}") from None
    return trunk, tokenizer


def first_line(e: Exception) -> str:
    """Library errors can run to many lines; a PalkitError is one."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def check_bert_folder(folder: Path) -> None:
    """A local --base-model must hold a config and weights (transformers' own error is long)."""
    weights = (TRUNK_WEIGHTS, f"{TRUNK_WEIGHTS}.index.json", "pytorch_model.bin")
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: not a BERT checkpoint folder (no config.json); point "
                              "--base-model at a folder saved by transformers' save_pretrained")
    if not any((folder / w).is_file() for w in weights):
        raise CheckpointError(f"{folder}: has config.json but no BERT weights "
                              f"({' or '.join(weights[::2])}); point --base-model at a complete "
                              "checkpoint folder")


def load_model(model_dir: Path, tasks: list[str] | None = None) -> tuple[PalBert, Any, str]:
    """Load model_dir/{trunk,tasks}; refuse adapters trained against another trunk."""
    model_dir = Path(model_dir)
    trunk_dir = model_dir / "trunk"
    if not (trunk_dir / TRUNK_WEIGHTS).is_file():
        raise CheckpointError(f"{trunk_dir / TRUNK_WEIGHTS}: not found; is {model_dir} a palkit "
                              "model folder (RUN/model)?")
    trunk_sha = sha256_file(trunk_dir / TRUNK_WEIGHTS)
    trunk, tokenizer = load_trunk(trunk_dir)
    # A hidden folder is a task still being added (trainer/add_task.py stages it there).
    saved = sorted(p.name for p in (model_dir / "tasks").iterdir()
                   if p.is_dir() and not p.name.startswith("."))
    unknown = [t for t in tasks or [] if t not in saved]
    if unknown:
        raise CheckpointError(f"{model_dir}: has no task {', '.join(map(repr, unknown))} (it has: "
                              f"{', '.join(saved)})")
    names = tasks or saved
    configs = [read_task_config(model_dir / "tasks" / n, trunk_sha) for n in names]
    pals = {n: PalConfig.from_dict(c["pal"]) if c["pal"] else None for n, c in zip(names, configs)}
    try:
        model = PalBert(trunk, [TaskSpec.from_dict(c["task"]) for c in configs],
                        run_placement(list(pals.values())), pals)
    except ConfigError as e:
        raise CheckpointError(f"{model_dir}: {e}") from None
    for name in names:
        load_task_weights(model, name, model_dir / "tasks" / name / "adapter.safetensors")
    return model.eval(), tokenizer, trunk_sha


def run_placement(pals: list[PalConfig | None]) -> PalConfig | None:
    """The model's own adapter when its tasks differ (a task added later with its own): the
    most common one, ties to the first task's, so the launch tasks' stays the model's."""
    keys = [json.dumps(p.to_dict() if p else None, sort_keys=True) for p in pals]
    if not pals:
        return None
    return pals[max(range(len(pals)), key=lambda i: (keys.count(keys[i]), -i))]


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
    except (OSError, SafetensorError) as e:
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
                          "(trunk/ + tasks/); train one with `palkit train`")


def separate_models(run: Path) -> list[Path]:
    """The per-task runs (RUN/models/<task>) of a --mode separate run; [] for any other run.
    The one test of "is this a separate-mode run" for a folder on disk."""
    run = Path(run)
    if not (run / "models").is_dir() or (run / "model").exists():
        return []
    return sorted(p for p in (run / "models").iterdir() if p.is_dir())


def runs_beside(folder: Path) -> list[str]:
    """Names of the run directories (holding config.json) next to `folder`, for messages."""
    parent = Path(folder).parent
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir() if (p / "config.json").is_file())


# ---- training state ------------------------------------------------------------------------

@dataclass
class TrainingState:
    """Where the training loop is; saved with every checkpoint (RUN/last/state.json)."""
    phase: int = 0                 # index into the run's phases
    epoch: int = 0                 # finished epochs of this phase
    step: int = 0                  # finished steps of this epoch
    global_epoch: int = 0          # finished epochs over all phases
    streams: dict[str, int] = field(default_factory=dict)  # examples drawn per task stream
    best: dict[str, Any] | None = None                      # {"avg", "dev", "epoch"} of RUN/model
    elapsed_s: float = 0.0         # time in training steps
    loss_sum: float = 0.0          # this epoch's running loss
    loss_count: int = 0
    finished: bool = False
    gradvac_targets: list[list[float]] | None = None

    @classmethod
    def read(cls, path: Path) -> "TrainingState":
        d, names = read_json(path), {f.name for f in fields(cls)}
        if set(d) != names:
            raise CheckpointError(f"{path}: keys {sorted(set(d) ^ names)} do not match this "
                                  "palkit's training state; resume with the palkit that wrote it")
        return cls(**d)

    def end_epoch(self) -> None:
        self.epoch, self.step, self.loss_sum, self.loss_count = self.epoch + 1, 0, 0.0, 0
        self.global_epoch += 1

    def next_phase(self) -> None:
        self.phase, self.epoch, self.step, self.loss_sum, self.loss_count = \
            self.phase + 1, 0, 0, 0.0, 0


@dataclass
class Checkpoint:
    """What RUN/last holds besides the model: the loop position, optimizer tensors, RNG state and
    the metrics line of every epoch finished so far."""
    state: TrainingState
    optimizer: dict[str, torch.Tensor]
    rng_state: torch.Tensor
    metrics: list[str] = field(default_factory=list)


def best_tag(epoch: int) -> str:
    return f"best-{epoch:04d}"


def save_snapshot(run: Path, tag: str, kind: str, model: PalBert, tokenizer,
                  trunk_file: Path | None, write_extra: Callable[[Path], None]) -> None:
    """Write the model and `write_extra(folder)` into a temporary folder, then swap it in as
    RUN/<tag> in one step; `kind` names its kill points."""
    build = run / f".{tag}.tmp"
    remove_tree(build)
    try:
        save_model(model, tokenizer, build, trunk_file)
        kill_point(kind)
        write_extra(build)
        replace_dir(build, run / tag)
    except BaseException:
        remove_tree(build)
        raise
    kill_point(f"{kind}-placed")


def save_checkpoint(run: Path, model: PalBert, tokenizer, trunk_file: Path | None,
                    ckpt: Checkpoint) -> None:
    """RUN/last -> ckpt-EEEE-SSSSSS: the model, optimizer.safetensors, state.json, metrics.jsonl
    and a link to the best model. Moving `last` commits all of it at once."""
    def extra(folder: Path) -> None:
        save_file({**ckpt.optimizer, RNG_KEY: ckpt.rng_state}, folder / "optimizer.safetensors")
        write_json(folder / "state.json", asdict(ckpt.state))
        write_text(folder / "metrics.jsonl", "".join(f"{line}\n" for line in ckpt.metrics))
        if ckpt.state.best is not None:
            os.symlink(f"../{best_tag(ckpt.state.best['epoch'])}", folder / "best")

    tag = f"ckpt-{ckpt.state.global_epoch:04d}-{ckpt.state.step:06d}"
    save_snapshot(run, tag, "checkpoint", model, tokenizer, trunk_file, extra)
    point_symlink(run / "last", tag)
    kill_point("checkpoint-linked")
    tidy_run(run)


def save_best(run: Path, epoch: int, model: PalBert, tokenizer, trunk_file: Path | None,
              summary: dict[str, Any]) -> None:
    """RUN/best-EEEE: the best model so far and its summary.json. RUN/model reaches it once the
    epoch's checkpoint is saved."""
    save_snapshot(run, best_tag(epoch), "best", model, tokenizer, trunk_file,
                  lambda folder: write_json(folder / "summary.json", summary))


def link_run_files(run: Path) -> None:
    """RUN/metrics.jsonl and RUN/model as links through RUN/last (they dangle until the first
    checkpoint, like files not written yet)."""
    for name, target in RUN_LINKS.items():
        link = run / name
        if not link.is_symlink() or os.readlink(link) != target:
            point_symlink(link, target)


def tidy_run(run: Path) -> None:
    """Delete the snapshots no link reaches (those a newer checkpoint replaced, or a kill left
    behind) and half-written temporary folders."""
    keep = {(run / name).resolve().name for name in ("last", "model") if (run / name).exists()}
    for path in run.iterdir():
        if path.name in keep or not re.fullmatch(SNAPSHOT, path.name):
            continue
        if path.is_symlink():
            path.unlink()
        else:
            remove_tree(path)


def load_checkpoint(ckpt_dir: Path) -> Checkpoint:
    tensors = load_file(ckpt_dir / "optimizer.safetensors")
    state = TrainingState.read(ckpt_dir / "state.json")
    metrics_file = ckpt_dir / "metrics.jsonl"   # absent in the old layout (upgrade_legacy_run)
    metrics = metrics_file.read_text().splitlines() if metrics_file.is_file() else []
    return Checkpoint(state, tensors, tensors.pop(RNG_KEY), metrics)


def upgrade_legacy_run(run: Path) -> None:
    """A run written when RUN/metrics.jsonl was a file and RUN/model a link to best-EEEE: give its
    checkpoint the metrics lines and best-model link it stands for (link_run_files then makes
    the run's links)."""
    last = run / "last"
    if (last / "metrics.jsonl").is_file():
        return
    state = read_training_state(run)
    old = run / "metrics.jsonl"
    lines = old.read_text().splitlines()[:state.global_epoch] if old.is_file() else []
    if state.best is not None and not (last / "best").is_symlink():
        os.symlink(f"../{best_tag(state.best['epoch'])}", last / "best")
    write_text(last / "metrics.jsonl", "".join(f"{line}\n" for line in lines))


def mark_finished(run: Path, state: TrainingState) -> None:
    """Record in RUN/last/state.json that the run finished (nothing is left to resume)."""
    state.finished = True
    write_json(run / "last" / "state.json", asdict(state))


def read_training_state(run: Path) -> TrainingState:
    return TrainingState.read(run / "last" / "state.json")


def run_finished(run: Path) -> bool:
    """True when `run` has a checkpoint and it says the run finished."""
    return (run / "last").exists() and read_training_state(run).finished


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """RUN/metrics.jsonl: one record per finished epoch, in order."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def write_run_config(run: Path, config: dict[str, Any]) -> None:
    """RUN/config.json, once: a resumed run keeps the config it was started with."""
    if not (run / "config.json").exists():
        write_json(run / "config.json", config)


def read_run_config(run: Path) -> dict[str, Any]:
    return read_json(run / "config.json")
