"""Training configuration: one dataclass, two presets, config files that hold the same options.

Precedence: dataclass defaults < preset < --config file < flags given on the command line.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

MODES = ("pals", "shared", "separate")
SAMPLINGS = ("round-robin", "proportional", "sqrt", "annealed")
GRAD_SURGERIES = ("none", "pcgrad", "gradvac")
PAL_LAYERS = ("all", "top", "bottom")
STS_LOSSES = ("mse", "bce")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
BAD_ROWS = ("skip", "stop")
DATA_SOURCES = ("files", "hub")


@dataclass(frozen=True)
class TrainConfig:
    preset: str = "quick"
    mode: str = "pals"
    tasks: tuple[str, ...] = ("sst", "quora", "sts")
    custom_tasks: tuple[dict, ...] = ()
    sampling: str = "annealed"
    pal_size: int | None = None          # None: the paper's 204/768 scaled to the trunk
    pal_heads: int | None = None         # None: the trunk's head count
    pal_layers: str = "all"
    pal_share_projections: bool = True
    grad_surgery: str = "none"
    tune_adapters_after: int = 0
    freeze_trunk: bool = False
    base_model: str | None = None        # None: the embedded all-MiniLM-L6-v2
    epochs: int = 4
    steps_per_epoch: int = 100
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_len: int = 64
    sts_loss: str = "mse"  # measured against bce: higher STS-B Pearson (README, Results)
    seed: int = 0
    out: str = "runs/default"
    data_dir: str | None = None
    data_source: str = "files"           # files (--data-dir) or hub (Hugging Face datasets, online)
    bad_rows: str = "skip"               # skip (and report) or stop at a malformed data row
    max_train_examples: int | None = None  # cap per task, for smoke runs
    max_eval_examples: int | None = None   # cap per task on dev, for smoke runs
    eval_batch_size: int = 128
    save_every: int = 0                  # also checkpoint every N steps (0: at epoch ends only)
    device: str = "auto"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        for name, allowed in (("mode", MODES), ("sampling", SAMPLINGS),
                              ("grad_surgery", GRAD_SURGERIES), ("pal_layers", PAL_LAYERS),
                              ("sts_loss", STS_LOSSES), ("device", DEVICES),
                              ("precision", PRECISIONS), ("preset", tuple(PRESETS)),
                              ("bad_rows", BAD_ROWS), ("data_source", DATA_SOURCES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, "
                                 f"got '{getattr(self, name)}'")
        for name in ("epochs", "steps_per_epoch", "batch_size", "max_len", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.tune_adapters_after and self.mode != "pals":
            raise ValueError("tune_adapters_after needs mode 'pals' (it tunes the PAL adapters)")
        if self.freeze_trunk and self.mode == "separate":
            raise ValueError("freeze_trunk with mode 'separate' would train heads only; "
                             "use mode 'pals' or 'shared'")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tasks"] = list(self.tasks)
        d["custom_tasks"] = list(self.custom_tasks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"{source}: unknown option(s) {sorted(unknown)}")
        d = dict(d)
        if "tasks" in d:
            d["tasks"] = tuple(d["tasks"])
        if "custom_tasks" in d:
            d["custom_tasks"] = tuple(d["custom_tasks"])
        return cls(**d)

    def replace(self, **changes: Any) -> "TrainConfig":
        return replace(self, **changes)


# "quick" fits this 2-core CPU in about 20 minutes; "paper" is Stickland & Murray's schedule
# (section 4.2: 60,000 steps of batch 32 as 25 epochs of 2,400 steps, AdamW 2e-5, wd 0.01,
# 10% warmup then linear decay, max length 128, best epoch by average dev score).
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {},
    "paper": {"epochs": 25, "steps_per_epoch": 2400, "batch_size": 32, "lr": 2e-5,
              "weight_decay": 0.01, "warmup_ratio": 0.1, "max_len": 128},
}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Options from a .json or .toml file, keys spelled like the flags (dashes or underscores)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text())
        elif path.suffix == ".json":
            data = json.loads(path.read_text())
        else:
            raise ValueError(f"{path}: config files must end in .json or .toml")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: cannot parse ({e})") from None
    return {k.replace("-", "_"): v for k, v in data.items()}


def build_config(cli_values: dict[str, Any], config_file: str | None = None) -> TrainConfig:
    """Layer defaults, preset, config file and explicit flags (None means 'not given')."""
    from_file = read_config_file(config_file) if config_file else {}
    given = {k: v for k, v in cli_values.items() if v is not None}
    preset = given.get("preset", from_file.get("preset", "quick"))
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got '{preset}'")
    merged = {**PRESETS[preset], **from_file, **given, "preset": preset}
    return TrainConfig.from_dict(merged, source=config_file or "options")

