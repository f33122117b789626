"""Data loading: the minBERT layout, one-line errors naming file and line, dynamic padding."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from palkit.core.errors import DataError
from palkit.core.options import resolve_data_dir
from palkit.trainer.data import collate, encode, read_examples
from palkit.trainer.tasks import BUILTIN_TASKS, TaskSpec, resolve_tasks

SST = BUILTIN_TASKS["sst"]
STS = BUILTIN_TASKS["sts"]


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_reads_the_tab_separated_layout(tiny_data: Path):
    examples = read_examples(BUILTIN_TASKS["quora"], tiny_data, "train")
    assert len(examples) == 48
    assert len(examples[0].texts) == 2 and examples[0].label in (0.0, 1.0)


def test_quotes_inside_fields_are_kept(tmp_path: Path):
    write(tmp_path, "sst/ids-sst-train.csv",
          '\tid\tsentence\tsentiment\n0\ta\t"The ""Conan"" film"\t3\n')
    assert read_examples(SST, tmp_path, "train")[0].texts == ('The "Conan" film',)


@pytest.mark.parametrize("body, problem", [
    ("\tid\ttext\tsentiment\n0\ta\thi\t3\n", "1: missing column(s) ['sentence']"),
    ("\tid\tsentence\tsentiment\n0\ta\thi\t7\n", "2: label '7' is not a class index 0..4"),
    ("\tid\tsentence\tsentiment\n0\ta\thi\t3\n1\tb\thi\tgood\n", "3: label 'good'"),
    ("\tid\tsentence\tsentiment\n0\ta\t  \t3\n", "2: empty text in column 'sentence'"),
    ("\tid\tsentence\tsentiment\n0\ta\thi\n", "2: 3 fields, expected 4"),
    ("", "file is empty"),
])
def test_malformed_file_names_file_line_and_problem(tmp_path: Path, body: str, problem: str):
    path = write(tmp_path, "sst/ids-sst-train.csv", body)
    with pytest.raises(DataError) as err:
        read_examples(SST, tmp_path, "train")
    message = str(err.value)
    assert str(path) in message and problem in message and "\n" not in message


def test_regression_score_out_of_range(tmp_path: Path):
    write(tmp_path, "sts/sts-train.csv", "\tid\tsentence1\tsentence2\tsimilarity\n0\ta\tx\ty\t5.5\n")
    with pytest.raises(DataError, match=r"sts-train.csv:2: score 5.5 outside \[0.0, 5.0\]"):
        read_examples(STS, tmp_path, "train")


def test_skip_mode_reports_and_drops_a_bad_row(tmp_path: Path, capsys):
    rows = "".join(f"{i}\tx{i}\tfine film\t2\n" for i in range(200))
    write(tmp_path, "sst/ids-sst-train.csv", "\tid\tsentence\tsentiment\n" + rows + "200\tz\t\t2\n")
    examples = read_examples(SST, tmp_path, "train", bad_rows="skip")
    assert len(examples) == 200
    assert "ids-sst-train.csv:202: empty text" in capsys.readouterr().err


def test_skip_mode_still_stops_when_many_rows_are_bad(tmp_path: Path):
    write(tmp_path, "sst/ids-sst-train.csv", "\tid\tsentence\tsentiment\n0\ta\tok\t1\n1\tb\t\t1\n")
    with pytest.raises(DataError, match="right file"):
        read_examples(SST, tmp_path, "train", bad_rows="skip")


def test_missing_file_and_missing_split(tmp_path: Path):
    with pytest.raises(DataError, match="file not found.*check --data-dir"):
        read_examples(SST, tmp_path, "train")
    with pytest.raises(DataError, match="has no 'test' split"):
        read_examples(BUILTIN_TASKS["cfimdb"], tmp_path, "test")


def test_data_dir_flag_env_and_clear_error(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PALKIT_DATA_DIR", str(tmp_path))
    assert resolve_data_dir(None) == tmp_path
    assert resolve_data_dir(str(tmp_path / ".")) == tmp_path / "."
    monkeypatch.setenv("PALKIT_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(DataError, match="pass --data-dir DIR or set PALKIT_DATA_DIR"):
        resolve_data_dir(None)


def test_pairs_are_one_sequence_and_batches_pad_dynamically(tiny_bert: Path, tiny_data: Path):
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    split = encode(STS, read_examples(STS, tiny_data, "train"), tok, max_len=32)
    ids = split.input_ids[0]
    assert ids[0] == tok.cls_token_id and ids.count(tok.sep_token_id) == 2
    assert set(split.token_type_ids[0]) == {0, 1}
    lengths = [len(split.input_ids[i]) for i in (0, 1, 2)]
    batch = collate(split, [0, 1, 2], tok.pad_token_id)
    assert batch["input_ids"].shape == (3, max(lengths))
    assert batch["attention_mask"].sum(1).tolist() == lengths


def test_truncation_respects_max_len(tiny_bert: Path, tiny_data: Path):
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    split = encode(STS, read_examples(STS, tiny_data, "train"), tok, max_len=8)
    assert max(len(x) for x in split.input_ids) == 8


def test_a_task_is_data():
    custom = {"name": "topic", "kind": "single_classification", "text_columns": ["text"],
              "label_column": "label", "labels": ["a", "b", "c"],
              "files": {"train": "topic/train.tsv", "dev": "topic/dev.tsv"}}
    (spec,) = resolve_tasks(["topic"], [custom])
    assert spec.num_outputs == 3 and spec.metric == "accuracy"
    with pytest.raises(ValueError, match="kind 'regress'"):
        TaskSpec.from_dict({**custom, "kind": "regress"})
    with pytest.raises(ValueError, match="needs 2 text column"):
        TaskSpec.from_dict({**custom, "kind": "pair_classification"})
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        resolve_tasks(["nope"])


BOM = "\ufeff"


def test_a_byte_order_mark_reads_as_none(tmp_path: Path):
    """Excel's "CSV UTF-8" and Windows editors start files with U+FEFF: data files, task files
    and config files read the same with it as without it."""
    from palkit.trainer.add_task import task_from_options
    from palkit.trainer.config import build_config

    body = "sentence1\tsentence2\tsimilarity\nA man plays.\tA man is playing.\t4.2\n"
    write(tmp_path, "sts/sts-train.csv", BOM + body)
    write(tmp_path, "plain/sts-train.csv", body)
    plain = TaskSpec.from_dict({**STS.to_dict(), "files": {"train": "plain/sts-train.csv"}})
    assert read_examples(STS, tmp_path, "train") == read_examples(plain, tmp_path, "train")
    task = {"name": "topic", "kind": "single_classification", "text_columns": ["text"],
            "label_column": "label", "labels": ["a", "b"], "files": {"train": "t.tsv"}}
    toml = ('name = "topic"\nkind = "single_classification"\ntext_columns = ["text"]\n'
            'label_column = "label"\nlabels = ["a", "b"]\n[files]\ntrain = "t.tsv"\n')
    for name, text in (("task.json", json.dumps(task)), ("task.toml", toml)):
        path = write(tmp_path, name, BOM + text)
        assert path.read_bytes().startswith(b"\xef\xbb\xbf")
        assert task_from_options("topic", str(path), {}).to_dict() == \
            TaskSpec.from_dict(task).to_dict()
    for name, text in (("c.json", '{"epochs": 2, "max-len": 32}'),
                       ("c.toml", "epochs = 2\nmax-len = 32\n")):
        cfg = build_config({}, str(write(tmp_path, name, BOM + text)))
        assert (cfg.epochs, cfg.max_len) == (2, 32)
