"""Export's verification: does the written bundle compute what the PyTorch model computes, and
does int8 cost the user anything they would notice?

Every runtime runs every task's whole dev split (or built-in sentences) against PyTorch fp32 on
the same inputs. fp32 must stay within FP32_TOLERANCE; int8 is gated on the task metric's
change, with a paired bootstrap's 95% interval (`Gate`; the rule: docs/int8-gate.md), and
`gated_export` keeps the worst layers in float when a resolved loss points at them. The
bootstrap's seed is fixed, so export stays deterministic. verify.json keeps everything.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from palkit.core.host import cpu_model, int8_features
from palkit.core.stats import CONFIDENCE
from palkit.export.gate import FP32_TOLERANCE, Gate
from palkit.export.gate_stats import (compare, drop_bound, failure, is_close, refuses,
                                      unresolved_note)
from palkit.export.programs import reference_outputs
from palkit.export.sqnr import POINTED_DB, TASK_LAYERS_INT8, layer_sqnr, layer_table, pointed_layers
from palkit.runtime.bundle import read_bundle
from palkit.runtime.engine import Engine
from palkit.ui.progress import say

Log = Callable[[str], None]


ALL_TASKS_EXAMPLES = 32    # per task, through the all-tasks program (it runs every task each call)
BUILTIN_SENTENCES = [
    ("a gripping, beautifully acted film", "the movie was great"),
    ("the plot was thin and the jokes fell flat", "a boring and tired story"),
    ("how do i learn to cook rice?", "what is the best way to cook rice?"),
    ("two people are playing with a ball on the grass", "a man is running"),
    ("it was fine, nothing special", "it was ok"),
    ("why do cats sleep so much?", "why do dogs bark at night?"),
    ("an awful, terrible waste of time", "i loved every minute"),
    ("a woman is slicing an onion", "a woman is cutting an onion"),
]




# ---- inputs and the fp32 reference -----------------------------------------------------------

Encoded = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def encode_texts(tokenizer, texts: list[tuple[str, ...]], max_len: int) -> list[Encoded]:
    encs = [tokenizer(*t, truncation="longest_first", max_length=max_len,
                      return_token_type_ids=True) for t in texts]
    return [(torch.tensor([e["input_ids"]]), torch.ones(1, len(e["input_ids"]), dtype=torch.long),
             torch.tensor([e["token_type_ids"]])) for e in encs]


def encode_words(tokenizer, texts: list[str], max_len: int) -> tuple[list[Encoded], list[list[int]]]:
    """Texts as a tagging task reads them (runtime/tokenizer.py's `words`), with each word's
    first token position."""
    from palkit.runtime.labels import first_pieces

    encs = [tokenizer(t.split(), is_split_into_words=True, truncation=True, max_length=max_len,
                      return_token_type_ids=True) for t in texts]
    return ([(torch.tensor([e["input_ids"]]), torch.ones(1, len(e["input_ids"]), dtype=torch.long),
              torch.tensor([e["token_type_ids"]])) for e in encs],
            [first_pieces(e.word_ids()) for e in encs])


Gold = list[float] | list[tuple[str, ...]]


def verification_inputs(spec, tokenizer, max_len: int, data_dir: Path | None, n: int | None
                        ) -> tuple[list[Encoded], Gold | None, str, list[list[int]] | None]:
    """The task's dev examples (at most n), their gold labels, where they came from and (a
    tagging task) each word's first token; or the built-in sentences (no labels) when there is
    no dev file."""
    from palkit.trainer.data import read_examples

    if data_dir is not None and "dev" in spec.files and (data_dir / spec.files["dev"]).is_file():
        examples = read_examples(spec, data_dir, "dev", bad_rows="skip")[:n]
        texts, gold = [e.texts for e in examples], [e.label for e in examples]
        source = f"{len(examples)} dev examples from {data_dir}"
    else:
        texts = [pair if spec.is_pair else pair[:1] for pair in BUILTIN_SENTENCES]
        gold, source = None, "built-in sentences (no dev data found)"
    if spec.is_tagging:
        encoded, firsts = encode_words(tokenizer, [t[0] for t in texts], max_len)
        return encoded, gold, source, firsts
    return encode_texts(tokenizer, texts, max_len), gold, source, None


def stack_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    """One tensor of per-input outputs; a tagging task's [tokens, tags] rows zero-padded to the
    longest input (compare reads only each word's first piece)."""
    longest = max(r.shape[0] for r in rows)
    if rows[0].dim() == 1 or all(r.shape[0] == longest for r in rows):
        return torch.stack(rows)
    return torch.stack([torch.cat([r, r.new_zeros(longest - r.shape[0], *r.shape[1:])])
                        for r in rows])


def reference_batched(model, task: str, encoded: list[Encoded], batch: int = 64) -> torch.Tensor:
    """PyTorch fp32 outputs of `task` for every input, in batches of similar length (padding
    is masked, so each row is what the input alone gives, within float rounding)."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i][0].shape[1])
    out: list[torch.Tensor | None] = [None] * len(encoded)
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        width = max(encoded[i][0].shape[1] for i in chunk)
        ids, mask, types = (torch.zeros(len(chunk), width, dtype=torch.long) for _ in range(3))
        for row, i in enumerate(chunk):
            n = encoded[i][0].shape[1]
            ids[row, :n], mask[row, :n], types[row, :n] = (x[0] for x in encoded[i])
        for row, value in zip(chunk, reference_outputs(model, task, ids, mask, types)):
            out[row] = value[:encoded[row][0].shape[1]] if value.dim() == 2 else value
    return stack_rows(out)  # type: ignore[arg-type]



# ---- running the bundle ----------------------------------------------------------------------

def run_task(engine: Engine, task: str, encoded: list[Encoded],
             whole: bool = False) -> tuple[torch.Tensor, float]:
    """The engine's outputs for every input and its mean milliseconds per call; `whole`:
    through the all-tasks program, reading the task's own output slot."""
    got, ms = [], 0.0
    for ids, mask, types in encoded:
        if whole:
            outs, t = engine.run_all_ids(ids.numpy(), mask.numpy(), types.numpy())
            out = outs[task]
        else:
            out, t, _ = engine.run_ids(task, ids.numpy(), mask.numpy(), types.numpy())
        got.append(torch.from_numpy(out))
        ms += t
    return stack_rows(got), ms / max(1, len(encoded))


class Verifier:
    """The inputs and fp32 references of one export, computed once, and the checks of each
    runtime of the bundle written in `folder`."""

    def __init__(self, folder: Path, model, tokenizer, max_len: int, data_dir: Path | None,
                 int8: bool, gate: Gate, tasks: list[str], log: Log = say):
        self.folder, self.model, self.int8, self.gate, self.tasks, self.log = \
            folder, model, int8, gate, tasks, log
        self.inputs = {t: verification_inputs(model.tasks[t], tokenizer, max_len, data_dir,
                                              gate.max_examples) for t in tasks}
        self.sqnr: dict[str, list[dict[str, Any]]] = {}
        t0 = time.time()
        self.refs = {t: reference_batched(model, t, self.inputs[t][0]) for t in tasks}
        log(f"fp32 reference for {sum(len(r) for r in self.refs.values())} examples in "
            f"{time.time() - t0:.1f} s ({torch.get_num_threads()} threads)")

    def check(self, runtime: str, tasks: list[str] | None = None) -> dict[str, Any]:
        """The runtime's records (per task, and its all-tasks program's when it has one for
        exactly these tasks), failures, bytes and mean latency per call; `tasks`: only these
        (the fallback's first look at a step), the all-tasks program left out."""
        tasks = tasks or self.tasks
        bundle = read_bundle(self.folder)
        engine = Engine(bundle, runtime)
        self.log(f"verifying {runtime}: {', '.join(tasks)} "
                 f"({sum(len(self.inputs[t][0]) for t in tasks)} examples)")
        # mean_ms: kept only where the fallback reports its cost, so verify.json is otherwise
        # the same bytes on every export of the same model
        section: dict[str, Any] = {"tasks": {}, "failures": [], "notes": [], "mean_ms": {}}
        outputs = {}
        for t in tasks:
            encoded, gold, source, firsts = self.inputs[t]
            outputs[t], section["mean_ms"][t] = run_task(engine, t, encoded)
            r = compare(self.model.tasks[t], self.refs[t], outputs[t], gold, source, self.gate,
                        firsts)
            section["tasks"][t] = r
            where = f"{runtime}/{t}"
            section["failures"] += [f for f in [failure(r, where, self.int8, self.gate)] if f]
            section["notes"] += [n for n in [self.int8 and unresolved_note(r, where, self.gate)]
                                 if n]
        for note in section["notes"]:
            self.log(f"note: {note}")
        program = engine.all_tasks_program()
        if tasks == self.tasks and program and set(program) <= set(tasks):
            # add_adapter leaves the program unchanged; its tasks are then not all checked here
            section["all_tasks_program"] = self.check_all_tasks(engine, program, outputs)
            section["failures"] += section["all_tasks_program"].pop("failures")
        files = self.folder / ("executorch" if runtime == "executorch" else "onnx")
        section["bytes"] = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
        return section

    def check_all_tasks(self, engine: Engine, program: list[str],
                        single: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The all-tasks program on the first inputs of each task. It must compute what the
        task's own program computes (already gated above): fp32 within FP32_TOLERANCE of
        PyTorch; int8 the same predictions as the task's int8 program."""
        tasks, failures = {}, []
        for t in program:
            encoded, gold, source, firsts = self.inputs[t]
            n = min(len(encoded), ALL_TASKS_EXAMPLES)
            got, _ = run_task(engine, t, encoded[:n], whole=True)
            ref, own = self.refs[t][:n], single[t][:n]
            width = got.shape[1] if got.dim() == 3 else None  # tag rows: the first n's longest
            ref, own = (ref[:, :width], own[:, :width]) if width else (ref, own)
            r = compare(self.model.tasks[t], ref, got, None, f"first {n} of {source}", self.gate,
                        firsts[:n] if firsts else None)
            r["max_abs_diff_vs_task_program"] = float((own - got).abs().max())
            where = f"{engine.runtime}/all-tasks program/{t}"
            if not self.int8:
                failures += [f for f in [failure(r, where, False, self.gate)] if f]
            if self.int8 and not self.model.tasks[t].is_regression:
                same = float((own.argmax(-1) == got.argmax(-1)).double().mean())
                r["agreement_with_task_program"] = same
                if same < 1.0 - 1.0 / n:  # one flip in n may sit on a decision boundary
                    failures.append(f"{where}: int8 predictions differ from {t}'s own program "
                                    f"on {1 - same:.1%} of {n} examples")
            tasks[t] = r
        return {"tasks": tasks, "failures": failures}

    def layers(self, runtime: str) -> list[dict[str, Any]]:
        """The per-layer SQNR table of `runtime` (every runtime's computed on the first call)."""
        if runtime not in self.sqnr:
            self.sqnr = layer_sqnr(self.model, self.tasks, self.inputs, list(TASK_LAYERS_INT8))
        return self.sqnr[runtime]


def summary(report: dict[str, Any]) -> str:
    """The refusal's one line."""
    return "verification failed: " + "; ".join(report["failures"])


def verify_bundle(folder: Path, model, tokenizer, max_len: int, data_dir: Path | None,
                  int8: bool, gate: Gate, tasks: list[str], log: Log = say) -> dict[str, Any]:
    """Check every runtime of the bundle written in `folder` (no fallback: add-task)."""
    v = Verifier(folder, model, tokenizer, max_len, data_dir, int8, gate, tasks, log)
    return assemble(v, {r: v.check(r) for r in read_bundle(folder).runtimes})


def assemble(v: Verifier, sections: dict[str, dict[str, Any]],
             **optional: dict[str, Any]) -> dict[str, Any]:
    """verify.json's body; each of `optional` only when not empty."""
    for s in sections.values():
        del s["mean_ms"]
    failures = [f for s in sections.values() for f in s["failures"]]
    notes = [n for s in sections.values() for n in s.pop("notes")]
    # int8's figures are this CPU's kernels' (docs/int8-gate.md, "Every CPU")
    report: dict[str, Any] = {"tolerance_fp32": FP32_TOLERANCE, "gate": asdict(v.gate),
                              "confidence": CONFIDENCE,
                              "verifying_machine": f"{cpu_model()} ({int8_features()})",
                              "runtimes": sections,
                              "passed": not failures, "failures": failures, "notes": notes}
    return {**report, **{key: value for key, value in optional.items() if value}}


def gated_export(write: Callable[[str, list[str]], None], folder: Path, model, tokenizer,
                 max_len: int, data_dir: Path | None, int8: bool, gate: Gate, tasks: list[str],
                 runtimes: list[str], log: Log = say) -> dict[str, Any]:
    """Check each runtime of the bundle in `folder`; where int8 fails the gate on a measured
    loss, fall back (`fall_back`). Returns verify.json's body, with the per-layer SQNR and the
    fallback's steps and costs, or why it was not tried."""
    v = Verifier(folder, model, tokenizer, max_len, data_dir, int8, gate, tasks, log)
    sections, layers, fallback, skipped = {}, {}, {}, {}
    for runtime in runtimes:
        t0 = time.time()
        section = v.check(runtime)
        log(f"verified {runtime} in {time.time() - t0:.0f} s")
        if int8:
            t0 = time.time()
            layers[runtime] = v.layers(runtime)
            log(f"{runtime}: per-layer SQNR in {time.time() - t0:.1f} s")
            close = any(is_close(r, gate) for r in section["tasks"].values())
            if section["failures"] or close:
                log(f"{runtime}: {'gate failed' if section['failures'] else 'gate close'}; "
                    f"worst int8 layers (output SQNR on dev inputs):\n"
                    + layer_table(layers[runtime]))
        if section["failures"] and int8:
            section, entry = fall_back(v, write, runtime, section, layers[runtime])
            if "skipped" in entry:
                skipped[runtime] = entry["skipped"]
            else:
                fallback[runtime] = entry
        sections[runtime] = section
    # fallback_skipped: why no layer was kept in float, per runtime
    return assemble(v, sections, layers=layers, fallback=fallback, fallback_skipped=skipped)


def fall_back(v: Verifier, write: Callable[[str, list[str]], None], runtime: str,
              section: dict[str, Any], layers: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Keep the layers the SQNR table points at in float, worst first, `write(runtime,
    float_layers)` that runtime again and check it, until it passes or `gate.max_float_layers`
    are kept; only when every failure is a measured loss. A step checks the failing tasks first
    (a float trunk layer changes every task, so all are checked once those pass; a refusal's
    report names the tasks its last step did not check again). Returns the last section and
    verify.json's fallback entry, or {"skipped": why} when no layer was tried."""
    gate, log = v.gate, v.log
    failing = [t for t, r in section["tasks"].items() if failure(r, t, True, gate)]
    unresolved = [t for t in failing if refuses(section["tasks"][t], gate)
                  and section["tasks"][t]["verdict"] != "loss"]
    kept = list(gate.keep_float.get(runtime, []))
    candidates = [c for c in pointed_layers(runtime, layers) if c not in kept]
    reason = skip_reason(gate, unresolved, candidates, layers)
    if reason:
        log(f"{runtime}: no layer kept in float: {reason}")
        return section, {"skipped": reason}
    first, steps = section, []
    while section["failures"] and len(steps) < min(gate.max_float_layers, len(candidates)):
        kept.append(candidates[len(steps)])
        log(f"{runtime}: keeping {kept[-1]} in float ({len(kept)}/{gate.max_float_layers}) "
            f"after: {section['failures'][0]}")
        write(runtime, list(kept))
        section = v.check(runtime, failing or None)
        if not section["failures"] and failing:
            section = v.check(runtime)
        steps.append({"float_layers": list(kept), "failures": section["failures"],
                      "drop_bounds": {t: drop_bound(r) for t, r in section["tasks"].items()}})
    section["not_rechecked"] = [t for t in v.tasks if t not in section["tasks"]]
    # what keeping layers in float cost: the runtime's bytes and each task's mean latency per
    # call over its verification inputs (same inputs, same process), before and after
    return section, {
        "float_layers": steps[-1]["float_layers"], "steps": steps,
        "before": {"failures": first["failures"], "bytes": first["bytes"],
                   "mean_ms": first["mean_ms"],
                   "drop_bounds": {t: drop_bound(r) for t, r in first["tasks"].items()}},
        "bytes_ratio": section["bytes"] / first["bytes"], "mean_ms": section["mean_ms"],
        "latency_ratio": {t: ms / max(first["mean_ms"][t], 1e-9)
                          for t, ms in section["mean_ms"].items()}}


def skip_reason(gate: Gate, unresolved: list[str], candidates: list[str],
                layers: list[dict[str, Any]]) -> str | None:
    """Why keeping layers in float cannot help this failure; None when it may."""
    if gate.max_float_layers == 0:
        return "the fallback is off (max_float_layers 0)"
    if unresolved:
        return (f"{', '.join(unresolved)}: not a loss the dev split resolves, so no layer can be "
                "blamed (more dev examples, or --max-drop, decide it)")
    if not candidates:
        median = statistics.median(r["sqnr_db"] for r in layers)
        return (f"no layer's SQNR stands out (worst {layers[0]['sqnr_db']:.1f} dB, median "
                f"{median:.1f}; the fallback needs {POINTED_DB:g} dB below the median)")
    return None
