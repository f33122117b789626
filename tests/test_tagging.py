"""The set and tagging kinds (multi_label, token_tagging): their decoding against the CoNLL
reference (seqeval), reading and refusing their files, encoding their targets, and the whole
path on a toy ATIS: train both on one trunk, evaluate (sentence accuracy), export both runtimes
and predict intents and spans."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from seqeval.metrics import f1_score, precision_score, recall_score
from transformers import AutoTokenizer

from palkit.core.errors import ConfigError, DataError
from palkit.runtime.labels import (bio_spans, first_pieces, label_set, span_counts, span_f1,
                                   word_tags)
from palkit.trainer.data import IGNORED, collate, encode, read_examples
from palkit.trainer.metrics import sentence_accuracy, set_metrics, tagging_metrics
from palkit.trainer.config import TrainConfig
from palkit.trainer.run_setup import fresh_model, labels_seen
from palkit.trainer.tasks import BUILTIN_TASKS, TaskSpec

INTENT, SLOTS = BUILTIN_TASKS["atis_intent"], BUILTIN_TASKS["atis_slots"]
TAGS = st.lists(st.lists(st.sampled_from(["O", "B-a", "I-a", "B-b", "I-b"]), min_size=1,
                         max_size=8), min_size=1, max_size=6)


# ---- decoding ---------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(TAGS, st.randoms(use_true_random=False))
def test_span_f1_equals_seqeval_the_conll_reference(gold, rng):
    predicted = [[rng.choice(["O", "B-a", "I-a", "B-b", "I-b"]) for _ in g] for g in gold]
    precision, recall, f1 = span_f1([span_counts(g, p) for g, p in zip(gold, predicted)])
    assert f1 == pytest.approx(f1_score(gold, predicted, zero_division=0))
    assert precision == pytest.approx(precision_score(gold, predicted, zero_division=0))
    assert recall == pytest.approx(recall_score(gold, predicted, zero_division=0))


def test_an_i_tag_after_o_or_another_type_starts_a_span():
    spans = bio_spans(["B-a", "I-a", "I-b", "O", "I-a", "B-a"])
    assert [(s.type, s.start, s.end) for s in spans] == [("a", 0, 2), ("b", 2, 3), ("a", 4, 5),
                                                          ("a", 5, 6)]


def test_label_set_takes_every_label_over_the_threshold_else_the_top_one():
    assert label_set([2.0, -1.0, 0.0], ["a", "b", "c"], 0.5) == ("a", "c")
    assert label_set([-3.0, -1.0, -2.0], ["a", "b", "c"], 0.5) == ("b",)


def test_first_pieces_mark_words_without_a_piece():
    assert first_pieces([None, 0, 0, 1, None]) == [1, 3]
    assert first_pieces([None, 0, 2, 2, None]) == [1, -1, 2]  # word 1 had no piece


def test_set_and_sentence_metrics():
    gold = [("a",), ("a", "b"), ("b",)]
    predicted = [("a",), ("b", "a"), ("a",)]
    m = set_metrics("t", predicted, gold)
    assert m["t_acc"] == pytest.approx(2 / 3)
    assert m["t_micro_f1"] == pytest.approx(2 * 3 / (4 + 4))
    tags_gold, tags_pred = [("B-x", "O"), ("O",), ("B-x",)], [("B-x", "O"), ("O",), ("O",)]
    assert tagging_metrics("s", tags_pred, tags_gold)["s_f1"] == pytest.approx(2 * 1 / (1 + 2))
    # both tasks right: text 0 only (text 1's set is right but... its tags are right too)
    assert sentence_accuracy([INTENT, SLOTS], [predicted, tags_pred], [gold, tags_gold]) == \
        pytest.approx(2 / 3)


# ---- reading ----------------------------------------------------------------------------------

def test_atis_tasks_read_their_labels_from_the_train_split(tiny_data: Path):
    train = read_examples(SLOTS, tiny_data, "train")
    spec = SLOTS.with_labels(labels_seen(train))
    assert spec.labels == ("B-fromloc", "B-toloc", "I-fromloc", "I-toloc", "O")
    intents = INTENT.with_labels(labels_seen(read_examples(INTENT, tiny_data, "train")))
    assert intents.labels == ("atis_airfare", "atis_flight")
    assert all(len(e.label) == len(e.texts[0].split()) for e in train)


def test_a_set_tasks_head_starts_at_its_train_label_prior(tiny_bert: Path, tiny_data: Path):
    train = {t.name: read_examples(t, tiny_data, "train") for t in (INTENT, SLOTS)}
    specs = [t.with_labels(labels_seen(train[t.name])) for t in (INTENT, SLOTS)]
    counts = [sum(label in e.label for e in train[INTENT.name]) for label in specs[0].labels]
    share = torch.tensor([(c + 0.5) / (len(train[INTENT.name]) + 1) for c in counts])
    cfg = TrainConfig(base_model=str(tiny_bert), mode="shared")
    model, _, _ = fresh_model(cfg, specs, torch.device("cpu"), train)
    torch.testing.assert_close(torch.sigmoid(model.heads[INTENT.name].out.bias), share)
    assert not model.heads[SLOTS.name].out.bias.any()   # a tagging head starts at zero


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _task(kind: str, **fields) -> TaskSpec:
    return TaskSpec.from_dict({"name": "t", "kind": kind, "text_columns": ["words"],
                               "label_column": "y", "files": {"train": "t.tsv"}, **fields})


@pytest.mark.parametrize("kind, row, message", [
    ("token_tagging", "a b c\tO B-x", r"t\.tsv:2: 2 tags in column 'y' for 3 words in 'words'"),
    ("token_tagging", "a b\tO X-y", r"t\.tsv:2: tag 'X-y' in column 'y' is not BIO"),
    ("token_tagging", " \tO", r"t\.tsv:2: empty text in column 'words'"),
    ("multi_label", "a b\t ; ", r"t\.tsv:2: no label in column 'y'"),
])
def test_bad_rows_name_file_line_and_field(tmp_path: Path, kind, row, message):
    _write(tmp_path / "t.tsv", f"words\ty\n{row}\n")
    with pytest.raises(DataError, match=message):
        read_examples(_task(kind), tmp_path, "train", bad_rows="stop")


def test_quoting_none_reads_quotes_inside_words_and_csv_quoting_refuses_them(tmp_path: Path):
    _write(tmp_path / "t.tsv", 'words\ty\n"hi she said\tO O O\nthen left\tO O\n')
    rows = read_examples(_task("token_tagging", quoting="none"), tmp_path, "train")
    assert [e.texts[0] for e in rows] == ['"hi she said', 'then left']
    # with csv quoting the opening quote swallows the rest of the file into one field
    with pytest.raises(DataError, match=r"t\.tsv:2: a field opened by '\"' runs over lines "
                                        r"2-3; .* \"quoting\": \"none\""):
        read_examples(_task("token_tagging"), tmp_path, "train", bad_rows="stop")


def test_a_comma_separated_quoted_file(tmp_path: Path):
    _write(tmp_path / "t.tsv", 'words,y\n"a, b",x;z\n')
    rows = read_examples(_task("multi_label", delimiter="comma"), tmp_path, "train")
    assert (rows[0].texts, rows[0].label) == (("a, b",), ("x", "z"))


def test_task_fields_are_checked():
    with pytest.raises(ConfigError, match="'O', 'B-x', 'I-x'"):
        _task("token_tagging", labels=["B-x", "I-x"])
    with pytest.raises(ConfigError, match="threshold must lie between 0 and 1"):
        _task("multi_label", threshold=1.5)
    with pytest.raises(ConfigError, match="delimiter must be one of tab, comma"):
        _task("multi_label", delimiter=";")
    with pytest.raises(ConfigError, match="its train split has 1 label"):
        _task("multi_label").with_labels({"only"})


# ---- encoding ---------------------------------------------------------------------------------

def test_each_words_first_piece_carries_its_tag_and_cut_words_are_said(tiny_bert: Path,
                                                                        tmp_path: Path, capsys):
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    _write(tmp_path / "t.tsv", "words\ty\nshow flights from boston\tO O O B-c\n")
    spec = _task("token_tagging").with_labels({"B-c"})
    examples = read_examples(spec, tmp_path, "train")
    split = encode(spec, examples, tok, max_len=32)
    firsts = split.first_pieces[0]
    assert len(firsts) == 4 and firsts[0] == 1
    targets = split.labels[0]
    assert [int(targets[p]) for p in firsts] == [spec.labels.index(t) for t in examples[0].label]
    assert int((targets != IGNORED).sum()) == 4   # later pieces, [CLS], [SEP], padding: no loss
    batch = collate(split, [0], tok.pad_token_id)
    assert batch["labels"].shape == batch["input_ids"].shape
    cut = encode(spec, examples, tok, max_len=8)   # "boston" is letters: past 8 tokens
    assert len(cut.first_pieces[0]) < 4
    assert "past max length 8" in capsys.readouterr().err


def test_labels_train_never_had_are_counted_and_named(tiny_bert: Path, tmp_path: Path, capsys):
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    _write(tmp_path / "t.tsv", "words\ty\na\tx;new\nb\tnew\n")
    spec = _task("multi_label").with_labels({"x", "z"})
    split = encode(spec, read_examples(spec, tmp_path, "train"), tok, max_len=16)
    assert split.labels.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert "2 gold labels the train split never had (new x2)" in capsys.readouterr().err


# ---- the whole path on a toy ATIS -------------------------------------------------------------

@pytest.fixture(scope="module")
def atis_run(tmp_path_factory, tiny_bert: Path, tiny_data: Path) -> Path:
    from palkit.trainer.train import train
    from testing_utils import tiny_config
    out = tmp_path_factory.mktemp("atis") / "run"
    return train(tiny_config(tiny_bert, tiny_data, out, tasks=("atis_intent", "atis_slots"),
                             epochs=8, steps_per_epoch=40, lr=3e-3, max_len=64))


def test_intent_and_slots_train_on_one_trunk_and_score_together(atis_run: Path,
                                                                 tiny_data: Path):
    from palkit.trainer.scoring import score_run
    r = score_run(atis_run, tiny_data, "test", None, None)
    assert r["tasks"] == ["atis_intent", "atis_slots"]
    assert r["atis_slots_f1"] > 0.5 and r["atis_intent_acc"] > 0.5   # learnable toy
    assert 0 <= r["atis_intent+atis_slots_sentence_acc"] <= min(r["atis_intent_acc"], 1)
    config = json.loads((atis_run / "model/tasks/atis_slots/adapter_config.json").read_text())
    assert config["task"]["labels"] == ["B-fromloc", "B-toloc", "I-fromloc", "I-toloc", "O"]


def test_the_bundle_computes_what_pytorch_does_and_predicts_spans(atis_run: Path,
                                                                  tiny_data: Path,
                                                                  tmp_path: Path):
    from palkit.export.bundle import export_run
    from palkit.export.evaluate import evaluate_bundle
    from palkit.export.options import ExportOptions
    from palkit.export.programs import reference_outputs
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.engine import Engine
    from palkit.runtime.inputs import Texts
    from palkit.trainer.checkpoint import load_model, resolve_model_dir
    from palkit.trainer.scoring import score_run

    out = tmp_path / "bundle"
    export_run(atis_run, out, ExportOptions(quant="fp32", data_dir=tiny_data), log=lambda s: None)
    manifest = json.loads((out / "manifest.json").read_text())
    kinds = {t["name"]: (t["kind"], t["decoding"], t["threshold"]) for t in manifest["tasks"]}
    assert kinds == {"atis_intent": ("multi_label", "sigmoid_threshold", 0.5),
                     "atis_slots": ("token_tagging", "first_piece_bio_spans", None)}
    model, _, _ = load_model(resolve_model_dir(atis_run))
    reference = score_run(atis_run, tiny_data, "test", None, None)
    text = "show flights from new york to boston"
    for runtime in ("executorch", "onnxruntime"):
        engine = Engine(load_bundle(out, runtime=runtime), runtime)
        words = engine.tokenizer.words(text)
        got, _, _ = engine.run_ids("atis_slots", words.ids, words.mask, words.types)
        want = reference_outputs(model, "atis_slots", *(torch.from_numpy(x) for x in
                                                        (words.ids, words.mask, words.types)))
        assert got.shape == want[0].shape                 # one row of tag scores per token
        torch.testing.assert_close(torch.from_numpy(got), want[0], atol=1e-4, rtol=1e-4)
        by_task = {p.task: p for p in engine.predict_all(Texts(text, None))}
        spans = by_task["atis_slots"].spans
        assert all(s["text"] in text and s["type"] in ("fromloc", "toloc") for s in spans)
        assert by_task["atis_intent"].labels
        scored = evaluate_bundle(out, tiny_data, "test", runtime=runtime)
        for key in ("atis_intent_acc", "atis_slots_f1", "atis_intent+atis_slots_sentence_acc"):
            assert scored[key] == pytest.approx(reference[key], abs=1e-9), (runtime, key)


# ---- the app's golden file --------------------------------------------------------------------

DECODING_GOLDEN = Path(__file__).resolve().parents[1] / \
    "android_demo/core/src/test/resources/decoding/atis.json"


def test_the_apps_decoding_golden_is_what_palkit_decodes():
    """The file DecodingGoldenTest.java holds the app to (a real ATIS bundle's outputs): its
    words, pieces, label sets, tags and spans are what runtime/ makes of its rows today."""
    from palkit.runtime.manifest import TokenizerSettings
    from palkit.runtime.tokenizer import Tokenizer
    from palkit.trainer.run_setup import default_base_model

    golden = json.loads(DECODING_GOLDEN.read_text())
    settings = TokenizerSettings("vocab.txt", True, True, golden["max_length"], "[CLS]", "[SEP]",
                                 "[PAD]", "[UNK]", "[MASK]", 100)
    tokenizer = Tokenizer(settings, Path(default_base_model()) / "vocab.txt")
    set_labels, threshold = golden["set_task"]["labels"], golden["set_task"]["threshold"]
    tag_labels = golden["tag_task"]["labels"]
    assert len(golden["cases"]) >= 10 and any(c["spans"] for c in golden["cases"])
    for c in golden["cases"]:
        words = tokenizer.words(c["text"], warn=False)
        firsts = words.first_pieces + [-1] * (len(words.words) - len(words.first_pieces))
        assert (words.words, words.ids[0].tolist(), firsts) == \
            (c["words"], c["input_ids"], c["first_pieces"]), c["text"]
        tags = word_tags(c["token_rows"], words.first_pieces, tag_labels, len(words.words))
        assert tags == c["tags"]
        assert [[s.type, s.start, s.end] for s in bio_spans(tags)] == c["spans"]
        assert list(label_set(c["set_logits"], set_labels, threshold)) == c["labels"]


def test_the_atis_records_resampled_metrics_are_the_trainers():
    """lab/atis_results.py sums each metric per utterance so that a bootstrap can resample them;
    on the whole sample they are trainer/metrics.py's."""
    import numpy as np

    from lab.atis_results import metric_points, per_utterance
    rng = random.Random(0)
    tags = ["O", "B-a", "I-a", "B-b"]
    gold_tags = [tuple(rng.choice(tags) for _ in range(rng.randint(1, 6))) for _ in range(40)]
    pred_tags = [tuple(t if rng.random() < 0.8 else rng.choice(tags) for t in g) for g in gold_tags]
    intents = [("x",), ("y",), ("x", "y")]
    gold_set = [rng.choice(intents) for _ in range(40)]
    pred_set = [g if rng.random() < 0.8 else rng.choice(intents) for g in gold_set]
    u = per_utterance({"atis_intent": pred_set, "atis_slots": pred_tags},
                      {"atis_intent": gold_set, "atis_slots": gold_tags})
    got = {k: float(v[0]) for k, v in metric_points(u, np.arange(40)[None]).items()}
    assert got["intent_accuracy"] == pytest.approx(100 * set_metrics("t", pred_set, gold_set)["t_acc"])
    assert got["slot_f1"] == pytest.approx(100 * tagging_metrics("s", pred_tags, gold_tags)["s_f1"])
    assert got["sentence_accuracy"] == pytest.approx(100 * sentence_accuracy(
        [INTENT, SLOTS], [pred_set, pred_tags], [gold_set, gold_tags]))


def test_mixed_kinds_train_in_one_run_and_a_tagging_task_is_added_later(tmp_path: Path,
                                                                      tiny_bert: Path,
                                                                      tiny_data: Path):
    """One run mixes a one-label and a set task in its batch schedule; the slots are then
    added to its frozen trunk as top-1 PALs, and scored with the intents (sentence accuracy)."""
    from palkit import cli
    from palkit.trainer.scoring import score_run
    from palkit.trainer.train import train
    from testing_utils import tiny_config
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "run", mode="shared",
                            tasks=("sst", "atis_intent"), epochs=1, steps_per_epoch=6))
    assert {"sst_acc", "atis_intent_acc"} <= set(score_run(run, tiny_data, "dev", None, None))
    assert cli.main(["add-task", str(run), "--task", "atis_slots", "--data-dir", str(tiny_data),
                     "--adapter", "pal", "--pal-layers", "top-1", "--epochs", "1",
                     "--steps-per-epoch", "4"]) == 0
    scored = score_run(run, tiny_data, "dev", None, None)
    assert sorted(scored["tasks"]) == ["atis_intent", "atis_slots", "sst"]
    assert "atis_slots_f1" in scored and "atis_intent+atis_slots_sentence_acc" in scored
