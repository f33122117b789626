"""How a run's step runs when --cuda-graphs and --compile are not given (trainer/config.py
resolve_step, a pure function of the options, the device kind and the process count), and what
`palkit train` shows and records for it."""
from __future__ import annotations

import json

import pytest
import torch

from palkit import cli
from palkit.trainer.config import (COMPILE_PAYS_AFTER_STEPS, PRESETS, TrainConfig, build_config,
                                   resolve_step, run_steps)
from palkit.trainer.devices import Dist
from palkit.trainer.train import Run

PAPER = TrainConfig(**PRESETS["paper"])


def resolved(cfg: TrainConfig, cuda: bool = True, processes: int = 1) -> tuple[bool, bool, str]:
    out, note = resolve_step(cfg, cuda, processes)
    return out.cuda_graphs, out.compile, note


def test_the_break_even_of_compiling_is_the_measured_figures_arithmetic():
    # 150 s / (1/161.3 - 1/226.5 s per step) at the H100 figures
    assert COMPILE_PAYS_AFTER_STEPS == pytest.approx(84_050, abs=10)
    assert run_steps(PAPER) == 60_000
    assert run_steps(PAPER.replace(tune_adapters_after=2)) == 60_000 + 2 * 3 * 2400


def test_on_a_cpu_nothing_changes():
    assert resolved(TrainConfig(), cuda=False) == (False, False, None)
    assert resolved(PAPER.replace(epochs=100), cuda=False) == (False, False, None)
    assert resolved(TrainConfig(cuda_graphs=True, compile=True), cuda=False) == (True, True, None)


def test_on_cuda_the_step_is_captured_and_compiled_only_when_it_pays():
    assert resolved(PAPER) == (True, False, None)               # 60,000 steps: captured only
    long = PAPER.replace(epochs=40)                             # 96,000 steps
    assert resolved(long) == (True, True, None)
    assert resolved(long.replace(cuda_graphs=False)) == (False, False, None)   # eager: no compile
    assert resolved(long.replace(compile=False)) == (True, False, None)
    assert resolved(PAPER.replace(compile=True)) == (True, True, None)
    assert resolved(PAPER.replace(cuda_graphs=False)) == (False, False, None)


@pytest.mark.parametrize("options,processes,why", [
    ({"grad_surgery": "pcgrad"}, 1, "--grad-surgery steps on every task's batch at once"),
    ({}, 2, "2 processes (capture records one)"),
    ({"compile": True, "compile_mode": "reduce-overhead"}, 1,
     "--compile-mode reduce-overhead captures on its own"),
])
def test_options_that_cannot_be_captured_fall_back_to_eager_in_one_line(options, processes, why):
    graphs, compile, note = resolved(PAPER.replace(epochs=40, **options), processes=processes)
    assert graphs is False and compile is bool(options.get("compile"))
    assert note == (f"training eagerly, without CUDA graphs: {why} (pass --no-cuda-graphs to "
                    "silence this)")
    assert resolved(PAPER.replace(cuda_graphs=False, **options), processes=processes)[2] is None


def test_the_flags_and_config_files_take_true_false_or_nothing(tmp_path):
    assert build_config({}).cuda_graphs is None and build_config({}).compile is None
    assert build_config({"cuda_graphs": False}).cuda_graphs is False
    (tmp_path / "c.toml").write_text("cuda_graphs = false\ncompile = true\n")
    cfg = build_config({}, str(tmp_path / "c.toml"))
    assert (cfg.cuda_graphs, cfg.compile) == (False, True)
    (tmp_path / "bad.toml").write_text('cuda_graphs = "yes"\n')
    with pytest.raises(ValueError, match="'cuda_graphs' must be true or false"):
        build_config({}, str(tmp_path / "bad.toml"))


def test_train_help_shows_both_spellings_and_the_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert cli.main(["train", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if "--cuda-graphs" in x)
    assert lines[at].split()[1:3] == ["--cuda-graphs", "--no-cuda-graphs"]
    text = " ".join(" ".join(x.strip("│ ").split()) for x in lines[at:at + 2])
    assert "Default: on with a CUDA device unless an option cannot be captured" in text


def test_a_run_shows_the_fallback_and_records_what_ran(tmp_path, tiny_bert, tiny_data,
                                                       monkeypatch, capsys):
    """On a (pretended) CUDA device with gradient surgery, the Run falls back to eager with one
    line on stderr; a run's config.json keeps the options as given and its summary what ran
    (here a CPU runs the captured step uncaptured)."""
    import palkit.trainer.train as tt
    from testing_utils import tiny_config
    monkeypatch.setattr(tt, "resolve_step", lambda cfg, cuda, processes:
                        resolve_step(cfg, True, processes))
    run = Run(tiny_config(tiny_bert, tiny_data, tmp_path / "r", grad_surgery="pcgrad"), False)
    err = capsys.readouterr().err
    assert err.count("training eagerly, without CUDA graphs: --grad-surgery") == 1
    assert (run.cfg.cuda_graphs, run.cfg.compile) == (False, False)
    monkeypatch.setattr(tt, "setup_distributed", lambda cfg: Dist(0, 1, torch.device("cpu")))
    out = tt.train(tiny_config(tiny_bert, tiny_data, tmp_path / "plain", epochs=1,
                               steps_per_epoch=1))
    given = json.loads((out / "config.json").read_text())
    ran = json.loads((out / "model" / "summary.json").read_text())["config"]
    assert (given["cuda_graphs"], given["compile"]) == (None, None)   # resolved again on resume
    assert (ran["cuda_graphs"], ran["compile"]) == (True, False)      # the pretended CUDA
