"""The bundle contract in machine-readable form: every key of manifest.json, its type, whether a
reader requires it, and what it means.

The keys and types come from runtime/manifest.py's dataclasses, the one reader and writer, so
they cannot drift from what is read; this module adds where each class sits in the file and a
line of meaning per key. tests/test_bundle_contract.py holds runtime/BUNDLE.md's key table, the
Android app's key list (android_demo/manifest_keys.json) and its parser to it.

    python -m palkit.runtime.contract        # BUNDLE.md's key table, as Markdown
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from palkit.runtime.kinds import TASK_KINDS
from palkit.runtime.manifest import (FORMAT, IO, VERSION, AllTasksGraph, AllTasksMethod,
                                     ExecuTorchSection,
                                     FileEntry, Manifest, OnnxRuntimeSection, TaskEntry,
                                     TokenizerSettings, Trunk)

# Where each dataclass's keys sit. `[]` is every item of a list, `<path>` every bundle file,
# `<runtime>` every runtime the bundle has.
SECTIONS: dict[str, type] = {
    "": Manifest, "trunk": Trunk, "tokenizer": TokenizerSettings,
    "runtimes.executorch": ExecuTorchSection, "runtimes.executorch.all_tasks": AllTasksMethod,
    "runtimes.onnxruntime": OnnxRuntimeSection, "runtimes.onnxruntime.all_tasks": AllTasksGraph,
    "tasks[]": TaskEntry, "files.<path>": FileEntry,
}
# What a container holds, each item with its type and whether it is always there (a runtime's
# section only in a bundle exported for that runtime; its own keys are required with it).
ITEMS: dict[str, list[tuple[str, str, bool]]] = {
    "runtimes": [("runtimes.executorch", "object", False),
                 ("runtimes.onnxruntime", "object", False)],
    "tasks": [("tasks[]", "object", True)],
    "tasks[].files": [("tasks[].files.<runtime>", "string", True)],
    "files": [("files.<path>", "object", True)],
    "io": [(f"io.{side}", "list", True) for side in IO],
    **{f"io.{side}": [(f"io.{side}[]", "object", True)] for side in IO},
    **{f"io.{side}[]": [(f"io.{side}[].{name}", "string" if isinstance(value, str) else "list",
                         True) for name, value in IO[side][0].items()] for side in IO},
}
MEANING = {
    "format": f'always "{FORMAT}"',
    "version": f"the format version, {VERSION}; a reader refuses any other (see Changing the format)",
    "palkit_version": "the palkit that exported the bundle",
    "trunk": "the shared trunk",
    "trunk.sha256": "SHA-256 of the run's trunk weights; every task must name the same",
    "trunk.base_model": "the pretrained model the run started from (--base-model)",
    "trunk.hidden_size": "the trunk's width d",
    "trunk.num_layers": "the trunk's layer count",
    "trunk.pal": "the launch tasks' PAL placement (size, heads, layers, share_projections), or "
                 "null: heads only",
    "tokenizer": "BERT WordPiece settings",
    "tokenizer.vocab_file": "the vocabulary file, one token per line, id = line number",
    "tokenizer.lowercase": "lowercase before WordPiece",
    "tokenizer.strip_accents": "strip accents before WordPiece",
    "tokenizer.max_length": "tokens per input, [CLS] and [SEP] included; longer inputs are cut",
    "tokenizer.cls_token": "the token that starts every input",
    "tokenizer.sep_token": "the token that ends each text",
    "tokenizer.pad_token": "the padding token",
    "tokenizer.unk_token": "the token for a word piece the vocabulary lacks",
    "tokenizer.mask_token": "the mask token",
    "tokenizer.max_input_chars_per_word": "longer words become unk_token",
    "quantization": '{"scheme": "int8" or "fp32", "details": free text per runtime}',
    "runtimes": "one section per runtime exported",
    "runtimes.executorch": "the ExecuTorch/XNNPACK programs",
    "runtimes.executorch.version": "the executorch that lowered the programs",
    "runtimes.executorch.torch": "the torch that exported them",
    "runtimes.executorch.backend": 'the delegate, "xnnpack"',
    "runtimes.executorch.program": "the one-task program; task weights are method inputs",
    "runtimes.executorch.trunk_data": "the trunk's constants (trunk.ptd), shared by the programs",
    "runtimes.executorch.method": "the method of the trunk's placement: text inputs, then "
                                  "task_inputs",
    "runtimes.executorch.task_inputs": "tensor names of a task's weights file, in input order",
    "runtimes.executorch.output_columns": "width of the output rows; a task reads its first "
                                          "num_outputs columns",
    "runtimes.executorch.seq_len": '{"min", "max", "dynamic"}: the input lengths a program takes',
    "runtimes.executorch.non_delegated_ops": "operators left outside XNNPACK, or null",
    "runtimes.executorch.all_tasks": "the program running several tasks on one input",
    "runtimes.executorch.all_tasks.program": "its own program over the same trunk_data",
    "runtimes.executorch.all_tasks.method": "the method running `tasks`, stacked in this order",
    "runtimes.executorch.all_tasks.tasks": "the tasks it runs, in output-row order",
    "runtimes.executorch.methods": "the one-task methods of other placements, name -> "
                                   '{"adapter", "task_inputs"}',
    "runtimes.onnxruntime": "the ONNX Runtime graph",
    "runtimes.onnxruntime.version": "the onnxruntime the graph was checked with",
    "runtimes.onnxruntime.opset": "the graph's ONNX opset",
    "runtimes.onnxruntime.trunk_model": "the graph one task runs through (its adapter file "
                                        "chosen per run)",
    "runtimes.onnxruntime.output_columns": "width of the output, as for ExecuTorch",
    "runtimes.onnxruntime.adapter_inputs": "the overridable initializers an adapter file sets",
    "runtimes.onnxruntime.fusions": "fused operators the graph holds, by name, or null",
    "runtimes.onnxruntime.pal": "the graph's PAL placement (null: heads only); absent: "
                                "trunk.pal",
    "runtimes.onnxruntime.trunk_data": "the weights every graph of the section reads (ONNX "
                                       "external data, each tensor once); absent: trunk_model "
                                       "holds its own",
    "runtimes.onnxruntime.graphs": "one-task graphs of the tasks' own placements where they "
                                   "differ from pal, name -> {\"model\", \"adapter\", \"pal\", "
                                   "\"adapter_inputs\"}; a task runs in the one of its adapter, "
                                   "else in trunk_model",
    "runtimes.onnxruntime.all_tasks": "the graph running several tasks on one input",
    "runtimes.onnxruntime.all_tasks.model": "its own graph over the same trunk_data; each "
                                            "task's adapter tensors are inputs named task/name",
    "runtimes.onnxruntime.all_tasks.tasks": "the tasks it runs, in output-row order",
    "io": "the inputs and output every program and graph has",
    "io.inputs": "the text inputs, in this order",
    "io.outputs": "the one output",
    "io.inputs[].name": "input_ids, attention_mask, token_type_ids",
    "io.inputs[].dtype": "int64",
    "io.inputs[].shape": '[1, "seq"]',
    "io.outputs[].name": "logits",
    "io.outputs[].dtype": "float32",
    "io.outputs[].shape": '[1, "1+seq", "output_columns"]: row 0 the sentence, row 1 + p '
                          "token p",
    "tasks": "the tasks, in export order",
    "tasks[].name": "the task's name: 1-64 letters, digits, _ or -",
    "tasks[].kind": f"one of {', '.join(TASK_KINDS)} (runtime/kinds.py)",
    "tasks[].labels": "class, label or tag names, output column i is labels[i]; null for "
                      "regression",
    "tasks[].score_range": "[low, high] of a regression score; null for classification",
    "tasks[].metric": "what the task is scored by: accuracy (exact set for multi_label), "
                      "pearson or f1 (CoNLL spans)",
    "tasks[].decoding": "argmax, score, sigmoid_threshold (labels reaching `threshold`, else "
                        "the top one) or first_piece_bio_spans (a word's tag at its first "
                        "piece; CoNLL spans)",
    "tasks[].threshold": "multi_label: the sigmoid a label must reach; null otherwise",
    "tasks[].num_outputs": "the output columns the task uses",
    "tasks[].trunk_sha256": "must equal trunk.sha256",
    "tasks[].files": "runtime -> the task's own file",
    "tasks[].files.<runtime>": "that runtime's file of the task (weights or adapter)",
    "tasks[].spec": "the training TaskSpec (columns, data files), for palkit evaluate",
    "tasks[].adapter": '{"kind": "head" or "pal", "layers": [...]}; absent: trunk.pal\'s',
    "files": "every file of the bundle but manifest.json, verify.json and model.sig",
    "files.<path>": "a file, by its path relative to the bundle",
    "files.<path>.sha256": "its SHA-256, checked before first use",
    "files.<path>.bytes": "its size in bytes",
}


@dataclass(frozen=True)
class Key:
    path: str          # "tasks[].labels", "files.<path>.sha256", ...
    type: str          # as the reader types it
    required: bool     # a reader refuses a manifest (or runtime section) without it
    meaning: str


def manifest_keys() -> list[Key]:
    """Every key of manifest.json, parents before children, in the reader's field order."""
    return [Key("format", "str", True, MEANING["format"]),
            Key("version", "int", True, MEANING["version"]), *_children("")]


def _children(path: str) -> list[Key]:
    out: list[Key] = []
    if path in SECTIONS:
        for f in fields(SECTIONS[path]):
            child = f"{path}.{f.name}" if path else f.name
            optional = f.default is not MISSING or f.default_factory is not MISSING
            # a string default marks "absent" (e.g. TRUNK_PAL), not a value a file may hold
            sentinel = {"str"} if isinstance(f.default, str) else set()
            out += [Key(child, _json_type(str(f.type), sentinel), not optional, MEANING[child]),
                    *_children(child)]
    for child, kind, required in ITEMS.get(path, []):
        if not child.endswith("[]"):  # a list's items are described by their keys
            out.append(Key(child, kind, required, MEANING[child]))
        out += _children(child)
    return out


JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
              "None": "null"}


def _json_type(annotation: str, leave_out: set[str]) -> str:
    """A reader's annotation in JSON's words: `list[str] | None` -> `list or null`."""
    words = [JSON_TYPES.get(t, "list" if t.startswith("list") else "object")
             for t in annotation.split(" | ") if t not in leave_out]
    return " or ".join(dict.fromkeys(words))


def markdown_table() -> str:
    """BUNDLE.md's key table."""
    keys = manifest_keys()
    optional = [k.path for k in keys if not k.required]
    rows = ["| key | type | required | meaning |", "|---|---|---|---|"]
    for k in keys:
        parent = next((p for p in reversed(optional) if k.path.startswith(p + ".")), None)
        required = "no" if not k.required else f"with `{parent}`" if parent else "yes"
        rows.append(f"| `{k.path}` | {k.type} | {required} | {k.meaning.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
