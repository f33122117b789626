"""The tagging and label-set golden vectors the app's Java decoder (Decoding.java, and
BertTokenizer.encodeWords) tests against: a real bundle's outputs on ATIS utterances and what
palkit's runtime makes of them.

    python tests/tools/make_decoding_golden.py BUNDLE OUT.json [--runtime executorch]

BUNDLE holds a multi_label and a token_tagging task (the ATIS path's bundle). Each case: the
text, its words, input ids and first pieces (runtime/tokenizer.py's `words`), the set task's
logits and the tagging task's token rows (rounded to 1e-4, as the decoding reads them), and the
decoded label set, tags and spans. Committed as
android_demo/core/src/test/resources/decoding/atis.json.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from palkit.core.fileio import write_text
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.runtime.labels import bio_spans, label_set, word_tags

# Utterances from the ATIS test split (every 45th), then edge cases: punctuation inside a word,
# non-breaking and double spaces between words, a text cut at max length (long words: many
# pieces each).
EXTRA = ["show me flights from boston to denver tomorrow morning",
         "flights from pittsburgh,to baltimore on thursday",
         "list\u00a0flights from new\u00a0york to  miami",
         " ".join(["antidisestablishmentarianism"] * 30)]


def cases(engine: Engine, set_task: str, tag_task: str, texts: list[str]) -> list[dict]:
    s, t = engine.bundle.task(set_task), engine.bundle.task(tag_task)
    out = []
    for text in texts:
        words = engine.tokenizer.words(text, warn=False)
        set_rows, _, _ = engine.run_ids(set_task, words.ids, words.mask, words.types)
        tag_rows, _, _ = engine.run_ids(tag_task, words.ids, words.mask, words.types)
        logits = [round(float(x), 3) for x in set_rows]
        # only the rows a word's tag is read from (first pieces); the others are never read
        read = set(words.first_pieces)
        rows = [[round(float(x), 3) for x in row] if p in read else []
                for p, row in enumerate(tag_rows)]
        tags = word_tags(rows, words.first_pieces, t.labels, len(words.words))
        out.append({"text": text, "words": words.words, "input_ids": words.ids[0].tolist(),
                    "first_pieces": words.first_pieces + [-1] * (len(words.words)
                                                                - len(words.first_pieces)),
                    "set_logits": logits, "token_rows": rows,
                    "labels": list(label_set(logits, s.labels, float(s.threshold))),
                    "tags": tags,
                    "spans": [[sp.type, sp.start, sp.end] for sp in bio_spans(tags)]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--runtime", default="executorch")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/atis/atis-test.tsv"))
    args = ap.parse_args()
    engine = Engine(load_bundle(args.bundle, runtime=args.runtime), args.runtime)
    kinds = {t.kind: t.name for t in engine.bundle.manifest.tasks}
    with open(args.data, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [r["words"] for r in rows[::45]] + EXTRA
    s, t = engine.bundle.task(kinds["multi_label"]), engine.bundle.task(kinds["token_tagging"])
    # compact: one line (indented, every number would take a line of its own)
    write_text(args.out, json.dumps({
        "bundle_trunk_sha256": engine.bundle.manifest.trunk.sha256,
        "max_length": engine.tokenizer.max_length,
        "set_task": {"labels": s.labels, "threshold": s.threshold},
        "tag_task": {"labels": t.labels},
        "cases": cases(engine, s.name, t.name, texts)}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
