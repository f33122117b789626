"""The command line: every training option reachable, errors one line, quiet output, tables."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from dataclasses import fields
from pathlib import Path

import pytest
import typer

from palkit import cli
from palkit.bench.options import DEFAULT_BENCH_OUT
from palkit.report.commands import DEFAULT_REPORT_OUT
from palkit.trainer.config import TrainConfig, config_fields, field_default
from testing_utils import HANG_GUARD_S, REPO


def _command(name: str):
    return typer.main.get_command(cli.app).commands[name]


def _changed_value(f, tmp_path: Path, data: Path):
    """(command-line words, value TrainConfig should then hold) for a non-default value of f."""
    default, choices = field_default(f), f.metadata["choices"]
    if f.name == "data_dir":
        return [str(data)], str(data)
    if f.name == "pal_layers":
        return ["top-2"], "top-2"
    if f.name == "graph_widths":
        return ["32,64"], "32,64"
    if choices:
        value = next(c for c in choices if c != default)
        return [value], value
    if f.name == "tasks":
        return ["sst,quora"], ("sst", "quora")
    if f.name == "custom_tasks":
        task = {"name": "toy", "kind": "single_classification", "text_columns": ["text"],
                "label_column": "label", "labels": ["a", "b"], "files": {"train": "t.tsv"}}
        (tmp_path / "toy.json").write_text(json.dumps(task))
        return [str(tmp_path / "toy.json")], (task,)
    if f.type in ("bool", "bool | None"):   # None: decided per device; the flag sets True
        return [], not default
    if f.type in ("int", "int | None"):
        return ["7"], 7
    if f.type == "float":
        return ["0.25"], 0.25
    return ["somewhere"], "somewhere"


@pytest.fixture
def captured_config(monkeypatch, tmp_path):
    """Replace the training loop: `palkit train` then only builds and records its config."""
    from palkit.trainer import train
    seen: list[TrainConfig] = []
    monkeypatch.setattr(train, "train", lambda cfg, resume=False: seen.append(cfg) or
                        tmp_path)
    return seen


def test_every_training_field_is_a_flag_and_a_config_key(captured_config, tiny_data, tmp_path):
    flags = {opt for p in _command("train").params for opt in p.opts + p.secondary_opts}
    for f in config_fields():
        flag = "--" + f.name.replace("_", "-")
        assert flag in flags, f"TrainConfig.{f.name} has no {flag}"
        words, expected = _changed_value(f, tmp_path, tiny_data)
        if f.type in ("bool", "bool | None"):
            words = [flag if expected else f"--no-{flag[2:]}"]
        else:
            words = [flag, *words]
        assert cli.main(["train", *words, "--data-dir", str(tiny_data)]) == 0, f.name
        assert getattr(captured_config[-1], f.name) == expected, f.name
        # ... and the same option from a config file
        config = tmp_path / f"{f.name}.json"
        from_file = list(expected) if isinstance(expected, tuple) else expected
        config.write_text(json.dumps({"data_dir": str(tiny_data), f.name: from_file}))
        assert cli.main(["train", "--config", str(config)]) == 0, f.name
        assert getattr(captured_config[-1], f.name) == expected, f.name
    assert len(captured_config) == 2 * len(fields(TrainConfig))


def test_help_and_version_do_not_import_torch():
    code = ("import sys; from palkit import cli; cli.main(['--help']); "
            "cli.main(['train', '--help']); "
            "cli.main(['--version']); print(sorted(m for m in ('torch', 'transformers', "
            "'executorch', 'onnxruntime') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert "palkit 0.1.0" in proc.stdout and "--pal-layers" in proc.stdout


def test_known_failures_are_one_line_and_unknown_ones_keep_their_traceback(
        captured_config, monkeypatch, tiny_data, capsys):
    from palkit.trainer import train
    assert cli.main(["train", "--tasks", "sst,nope", "--data-dir", str(tiny_data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown task 'nope'") and err.count("\n") == 1

    def broken(cfg, resume=False):
        raise RuntimeError("a bug, not bad input")
    monkeypatch.setattr(train, "train", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train", "--data-dir", str(tiny_data)])


def test_bad_choice_is_a_usage_error_naming_the_flag(capsys):
    assert cli.main(["train", "--mode", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "--mode" in err and "bogus" in err and "Traceback" not in err


def test_default_outputs_are_git_ignored_never_the_committed_reports():
    for path in (DEFAULT_BENCH_OUT, DEFAULT_REPORT_OUT / "report.md"):
        assert not str(path).startswith("reports/")
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=REPO)
        assert ignored.returncode == 0, f"{path} is not git-ignored"


def test_console_script_is_declared():
    import tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["palkit"] == "palkit.cli:entry_point"
    assert callable(cli.entry_point)



def test_export_bench_and_verify_arch_flags_default_to_their_dataclasses(monkeypatch, tmp_path):
    """Each default is defined once, in the options dataclass: `palkit export` and `palkit bench`
    given no flags hand their work exactly the dataclass's defaults (a signature that drifts from
    its dataclass fails here), and verify-arch's --max-drop is the gate's."""
    from palkit.bench import run as bench_run
    from palkit.bench.options import BenchOptions
    from palkit.export import bundle
    from palkit.export.gate import Gate
    from palkit.export.options import ExportOptions

    seen = {}
    monkeypatch.setattr(bundle, "export_run",
                        lambda run, out, opts: seen.update(export=opts) or [])
    monkeypatch.setattr(bench_run, "bench",
                        lambda bundles, runs, out, opts: seen.update(bench=opts) or {"notes": []})
    data = tmp_path / "data"
    data.mkdir()
    assert cli.main(["export", str(tmp_path), "--out", str(tmp_path / "b"), "--data-dir",
                     str(data)]) == 0
    assert seen["export"] == ExportOptions(data_dir=data)
    assert cli.main(["bench", str(tmp_path), "--data-dir", str(data)]) == 0
    assert seen["bench"] == BenchOptions(data_dir=data)
    flags = {p.name: p for p in _command("verify-arch").params}
    assert flags["max_drop"].default == Gate().max_drop

# --- commands on a real (tiny) bundle ------------------------------------------------------

@pytest.fixture(scope="module")
def et_bundle(et_fp32: Path) -> Path:
    """ExecuTorch + ONNX Runtime, fp32, sst (one text) and sts (a pair)."""
    return et_fp32


def _palkit(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PALKIT_VERBOSE"}
    return subprocess.run([sys.executable, str(REPO / "cli.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_predict_prints_a_table_and_nothing_on_stderr(et_bundle):
    proc = _palkit("predict", str(et_bundle), "--task", "sst", "a good film")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "sst" in proc.stdout and "executorch" in proc.stdout and "text 1" in proc.stdout
    loud = _palkit("--verbose", "predict", str(et_bundle), "--task", "sst", "a good film")
    assert loud.returncode == 0 and loud.stdout.count("sst") == proc.stdout.count("sst")


def test_predict_ends_without_teardown_and_loses_no_output(et_bundle):
    """predict skips Python's interpreter teardown (cli.QUICK_EXIT): its piped output must
    still arrive whole, and a refusal still exits 2."""
    proc = _palkit("predict", str(et_bundle), "--all", "--json", "a good film", "a fine film")
    assert proc.returncode == 0, proc.stderr
    assert [p["task"] for p in json.loads(proc.stdout)["predictions"]] == ["sts"]
    refused = _palkit("predict", str(et_bundle), "--task", "nope", "a good film")
    assert refused.returncode == 2 and "no task 'nope'" in refused.stderr


def test_predict_all_runs_the_tasks_that_read_the_input(et_bundle, capsys):
    """One text runs the single-text tasks, two the pair tasks; the rest are skipped, said."""
    assert cli.main(["predict", str(et_bundle), "--all", "--json", "--runtime", "onnxruntime",
                     "how can i learn to cook"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert [(p["task"], p["read"]) for p in one["predictions"]] == [("sst", "text 1")]
    assert one["skipped"] == [{"task": "sts", "needs": "two texts"}]
    assert one["load_ms"] > 0 and one["import_ms"] >= 0
    assert cli.main(["predict", str(et_bundle), "--all", "--runtime", "onnxruntime",
                     "how can i learn to cook", "how can i learn to run"]) == 0
    table = capsys.readouterr().out
    assert "text 1 + text 2" in table and "skipped: needs one text" in table
    assert "bundle loaded in" in table and "importing onnxruntime took" in table


def test_input_mistakes_fail_before_any_runtime_is_imported(et_bundle, tmp_path):
    (tmp_path / "not-a-bundle").mkdir()
    mistakes = [
        (["--task", "sst", "a good film", "a second text"], "task 'sst' "
         "(single_classification) needs one text, got 2"),
        (["--task", "sts", "only one text"], "task 'sts' (pair_regression) needs two texts"),
        (["--task", "sst", "  "], "the text is empty"),
        (["--task", "sst", b"caf\xe9".decode("utf-8", "surrogateescape")], "not valid UTF-8"),
        (["--all", "a", "b", "c"], "give one text, or two for a pair task; got 3"),
        (["--task", "nope", "a good film"], "no task 'nope'"),
    ]
    calls = [(["predict", str(et_bundle), *words], want) for words, want in mistakes]
    calls += [(["predict", str(et_bundle) + "x", "--task", "sst", "a"], "manifest.json: not "
               "found"), (["predict", str(tmp_path / "not-a-bundle"), "--all", "a"],
                          "manifest.json: not found")]
    code = ("import contextlib, io, json, sys\nfrom palkit import cli\n"
            "out = []\n"
            f"for argv in {[argv for argv, _ in calls]!r}:\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        status = cli.main(argv)\n"
            "    out.append([status, err.getvalue()])\n"
            "print(json.dumps([out, sorted(m for m in ('torch', 'executorch', 'onnxruntime') "
            "if m in sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    results, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    for (argv, want), (status, err) in zip(calls, results):
        assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
        assert want in err, (argv, err)
    assert imported == []


def test_typed_lines_one_rule_for_predict_and_demo():
    from palkit.runtime.inputs import InputError, check_texts, split_line
    assert split_line("a ||| b", "line 1") == check_texts(["a", "b"])
    assert split_line(" just one ", "line 1").second is None
    with pytest.raises(InputError, match=r"^line 4: 3 texts separated by '\|\|\|'"):
        split_line("a ||| b ||| c", "line 4")
    with pytest.raises(InputError, match="^line 2: the second text is empty"):
        split_line("a |||  ", "line 2")


def test_predict_needs_one_of_task_and_all(et_bundle, capsys):
    assert cli.main(["predict", str(et_bundle), "a good film"]) == 2
    assert "give exactly one of --task NAME and --all" in capsys.readouterr().err


def test_demo_confirms_task_switches(et_bundle, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(
        "a good film\nhow can i cook ||| how can i run\n:task sts\nnot a pair\n:task nope\n"
        ":all\n:quit\n"))
    assert cli.main(["demo", str(et_bundle), "--runtime", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert "sst:" in out and "sts:" in out
    assert "running only sts" in out and "sts: skipped, needs two texts" in out
    assert "no task 'nope'" in out and "running every task" in out


def test_demo_skips_by_the_shared_rule_and_names_refused_lines(et_bundle, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(
        "a good film\n\nhow can i cook ||| how can i run\na ||| b ||| c\n   \n"))
    assert cli.main(["demo", str(et_bundle), "--runtime", "onnxruntime"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    after = lines[next(i for i, x in enumerate(lines) if x.startswith("tasks:")) + 1:]
    assert after[0] == "  sts: skipped, needs two texts (a ||| b)"
    assert after[1].startswith("  sst: ") and "%" in after[1]
    assert after[2] == "  sst: skipped, needs one text"
    assert after[3].startswith("  sts: score ")
    assert after[4] == ("error: line 4: 3 texts separated by '|||'; a line holds one text, or "
                        "two for a pair task (a ||| b)")
    assert captured.err == "note: 2 empty line(s) skipped (line 2, 5)\n"


def test_evaluate_prints_points_and_writes_only_when_asked(et_bundle, tiny_data, tmp_path,
                                                           capsys):
    before = sorted(p.name for p in et_bundle.iterdir())
    assert cli.main(["evaluate", str(et_bundle), "--data-dir", str(tiny_data), "--runtime",
                     "onnxruntime"]) == 0
    table = capsys.readouterr().out
    assert sorted(p.name for p in et_bundle.iterdir()) == before   # nothing written into it
    out = tmp_path / "m.json"
    assert cli.main(["evaluate", str(et_bundle), "--data-dir", str(tiny_data), "--runtime",
                     "onnxruntime", "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert f"{metrics['sst_acc'] * 100:.1f}" in table and f"{metrics['avg'] * 100:.1f}" in table


def test_export_refuses_an_existing_bundle_without_overwrite(et_bundle, tiny_pal_run, capsys):
    assert cli.main(["export", str(tiny_pal_run), "--out", str(et_bundle)]) == 2
    err = capsys.readouterr().err
    assert str(et_bundle) in err and "--overwrite" in err
    assert cli.main(["export", str(tiny_pal_run), "--tasks", "nope", "--out",
                     str(et_bundle.parent / "new-bundle")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and all(t in err for t in ("sst", "quora", "sts"))


def test_keygen_sign_verify_and_trusted_loading(et_bundle, tiny_data, tmp_path, capsys,
                                                monkeypatch):
    import shutil

    from palkit.runtime.signing import TRUST_KEY_ENV, sign_bundle
    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)  # the key travels as a value, not by env
    assert cli.main(["keygen", str(tmp_path / "keys")]) == 0
    private, public = tmp_path / "keys" / "palkit.key.pem", tmp_path / "keys" / "palkit.pub.pem"
    assert cli.main(["keygen", str(tmp_path / "keys")]) == 2          # never overwrites a key
    assert "exists" in capsys.readouterr().err
    bundle = tmp_path / "bundle"
    shutil.copytree(et_bundle, bundle)
    assert cli.main(["verify", str(bundle), "--trust-key", str(public)]) == 2
    assert "not signed" in capsys.readouterr().err
    predict = ["predict", str(bundle), "--task", "sst", "--runtime", "onnxruntime", "--json"]
    assert cli.main([*predict, "--trust-key", str(public), "a good film"]) == 2
    assert "not signed" in capsys.readouterr().err                     # predict reads the key
    sign_bundle(bundle, private)
    assert cli.main(["verify", str(bundle), "--trust-key", str(public)]) == 0
    assert "files match the signature" in capsys.readouterr().out
    assert cli.main([*predict, "--trust-key", str(public), "a good film"]) == 0
    assert json.loads(capsys.readouterr().out)["predictions"][0]["task"] == "sst"
    with open(bundle / "onnx" / "sst.onnx_adapter", "r+b") as f:   # same size, other bytes
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    assert cli.main(["verify", str(bundle), "--trust-key", str(public)]) == 2
    assert "sst.onnx_adapter" in capsys.readouterr().err
    # the loaders refuse it too, naming the file, before any runtime reads it
    assert cli.main([*predict, "--trust-key", str(public), "a good film"]) == 2
    assert "sst.onnx_adapter" in capsys.readouterr().err
    assert cli.main(["evaluate", str(bundle), "--runtime", "onnxruntime", "--data-dir",
                     str(tiny_data), "--trust-key", str(public)]) == 2
    assert "sst.onnx_adapter" in capsys.readouterr().err
    assert TRUST_KEY_ENV not in os.environ                          # nothing set aside


def test_help_says_what_options_are_without_type_noise(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    screens = {}
    for argv in (["--help"], ["train", "--help"], ["export", "--help"], ["predict", "--help"],
                 ["bench", "--help"]):
        assert cli.main(argv) == 0
        screens[argv[0]] = capsys.readouterr().out
    for name, text in screens.items():
        assert "<bool>" not in text, name                # a flag takes no value
        assert "--help" in text and "-h" in text
    train = screens["train"]
    assert "(custom tasks: --custom-tasks)" in train and "--custom-task)" not in train
    assert "min on a" not in train and "(default )" not in train
    assert "bundles/-" not in screens["export"] and "bundles/default-int8" in screens["export"]
    assert "<float>" in train                          # options that take a value keep their type


def test_evaluate_table_keeps_the_average_in_its_own_column(capsys):
    from palkit.ui.tables import metrics_table
    metrics_table({"tasks": ["sst", "sts"], "sst_acc": 0.4123, "sts_pearson": 0.7712,
                   "sts_spearman": 0.7791, "avg": 0.6939}, "dev")
    rows = [[c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]
            for line in capsys.readouterr().out.splitlines() if line.startswith(("│", "┃"))]
    assert rows[0] == ["task", "accuracy", "Pearson", "Spearman", "average"]
    assert rows[1] == ["sst", "41.2", "–", "–", ""]
    assert rows[2] == ["sts", "–", "77.1", "77.9", ""]
    assert rows[3] == ["all tasks", "", "", "", "69.4"]


def test_targets_table_prints_a_paired_ratio_with_its_interval(capsys):
    from palkit.ui.tables import targets_table
    targets_table({"pal_vs_plain": {"what": "one PAL task / plain", "value": 1.402,
                                    "target": "<= 1.05", "met": False},
                   "swap_ms": {"what": "adapter swap, ms", "value": 0.03, "target": "<= 10.0",
                               "met": True}},
                  "reference", {"pal_vs_plain": [1.394, 1.41]})
    rows = [[c.strip() for c in line.split("│")[1:-1]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert rows == [["one PAL task / plain", "1.4 [1.39, 1.41]", "<= 1.05", "no"],
                    ["adapter swap, ms", "0.03", "<= 10.0", "yes"]]


def test_training_reports_dev_scores_in_points(tiny_bert, tiny_data, tmp_path, capsys):
    """Points (69.39), as evaluate and results print them, not fractions (0.6939)."""
    from palkit.trainer.train import train
    from testing_utils import tiny_config
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "run", epochs=1))
    err = capsys.readouterr().err
    dev = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["dev"]
    line = next(x for x in err.splitlines() if "[joint epoch 1]" in x)
    assert f"avg={100 * dev['avg']:.2f}" in line and f"sst_acc={100 * dev['sst_acc']:.2f}" in line


def test_export_summary_shows_the_gated_metric_change():
    from palkit.export.commands import verified_change
    scored = {"agreement": 0.989, "max_abs_diff": 0.1, "metric": "sst_acc", "metric_change": 0.18,
              "metric_change_interval": [-0.36, 0.73]}
    assert verified_change(scored) == "sst_acc +0.18 points [-0.36, +0.73], agreement 0.989"
    sentences = {"agreement": 1.0, "max_abs_diff": 2.5e-3}
    assert verified_change(sentences) == "agreement 1.000, max |diff| 2.50e-03"


def test_quiet_silences_the_peers_tracer_notes_and_keeps_other_warnings(monkeypatch):
    from palkit.core import quiet

    for key in (quiet.VERBOSE_ENV, *quiet.QUIET_ENVIRONMENT):  # restored afterwards
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    notes = ["Converting a tensor to a Python boolean might cause the trace to be incorrect.",
             "Exporting aten::index operator of advanced indexing in opset 17 is achieved by"]
    for verbose, shown in [(True, [*notes, "a warning of palkit's own"]),
                           (False, ["a warning of palkit's own"])]:  # quiet last: the default
        with warnings.catch_warnings(record=True) as seen:
            quiet.configure(verbose)
            for message in [*notes, "a warning of palkit's own"]:
                warnings.warn(message, UserWarning)
        assert [str(w.message) for w in seen] == shown
