"""The rules between manifest.json's keys (runtime/BUNDLE.md, "A loader must refuse"): known
task kinds and decodings, one trunk, a file per task and runtime, every named file listed,
adapters with a method or graph, all-tasks programs naming the bundle's tasks. runtime/manifest.py
reads each key; these check what the keys say together."""
from __future__ import annotations

import json

from palkit.runtime.kinds import KINDS, TASK_KINDS
from palkit.runtime.manifest import (TRUNK_PAL, BundleError, ExecuTorchSection, Manifest,
                                     OnnxRuntimeSection, adapter_record, check_relative)


def check_path_types(m: Manifest, where: str) -> None:
    """Every path the manifest names is a string (JSON can say anything)."""
    paths = [("tokenizer.vocab_file", m.tokenizer.vocab_file)] + [
        (f"runtimes.{r}", rel) for r in m.runtime_names for rel in m.runtimes[r].runtime_files]
    for t in m.tasks:
        if not isinstance(t.files, dict):
            raise BundleError(f"{where}: task '{t.name}' 'files' is not an object; re-export "
                              "the bundle")
        paths += [(f"task '{t.name}' files", v) for v in t.files.values()]
    for r in m.runtime_names:
        program = m.all_tasks(r)
        if program is not None and not isinstance(program.tasks, list):
            raise BundleError(f"{where}: runtimes.{r}.all_tasks.tasks is not a list; "
                              "re-export the bundle")
    for key, value in paths:
        if not isinstance(value, str):
            raise BundleError(f"{where}: {key} is not a path string; re-export the bundle")


def check_manifest(m: Manifest, where: str) -> None:
    """The rules between keys: known task kinds, one trunk, a file per task and runtime."""
    check_path_types(m, where)
    for t in m.tasks:
        if t.kind not in TASK_KINDS:
            raise BundleError(f"{where}: task '{t.name}' has unknown kind '{t.kind}'")
        if t.decoding != KINDS[t.kind].decoding:
            raise BundleError(f"{where}: task '{t.name}' ({t.kind}) has decoding '{t.decoding}', "
                              f"this palkit decodes it as '{KINDS[t.kind].decoding}'; re-export "
                              "the bundle")
        if t.trunk_sha256 != m.trunk.sha256:
            raise BundleError(f"{where}: task '{t.name}' was built against trunk "
                              f"{str(t.trunk_sha256)[:12]}…, but this bundle's trunk is "
                              f"{str(m.trunk.sha256)[:12]}…; re-export it with `palkit export "
                              f"RUN --adapter {t.name}` from this trunk's run")
        for r in m.runtime_names:
            if r not in t.files:
                raise BundleError(f"{where}: task '{t.name}' has no {r} file")
    for r in m.runtime_names:
        program = m.all_tasks(r)
        unknown = [t for t in program.tasks if t not in m.task_names] if program else []
        if program is not None and (unknown or not program.tasks):
            raise BundleError(f"{where}: runtimes.{r}.all_tasks names tasks "
                              f"{unknown or '[]'} that the bundle lacks; re-export the bundle")
    if "executorch" in m.runtimes:
        check_methods(m, where)
    if "onnxruntime" in m.runtimes:
        check_graph_pal(m, where)
    for rel, owner in m.files_for().items():
        check_relative(rel, where, owner)
        if rel not in m.files:
            raise BundleError(f"{where}: {owner} names '{rel}', which is not listed under "
                              "'files'; re-export the bundle")


def check_methods(m: Manifest, where: str) -> None:
    """Every task's adapter is a head or PALs in known layers and has an ExecuTorch method; the
    all-tasks method's tasks come grouped by method (its inputs are one group after another)."""
    section = m.runtimes["executorch"]
    assert isinstance(section, ExecuTorchSection)
    for method, spec in (section.methods or {}).items():
        if not isinstance(spec, dict) or set(spec) != {"adapter", "task_inputs"} \
                or not isinstance(spec["task_inputs"], list):
            raise BundleError(f"{where}: runtimes.executorch.methods.{method} is not "
                              "{adapter, task_inputs}; re-export the bundle")
    layers = range(m.trunk.num_layers)
    for t in m.tasks:
        a = t.adapter
        if a is not None and not (isinstance(a, dict) and set(a) == {"kind", "layers"}
                                  and a["kind"] in ("head", "pal")
                                  and isinstance(a["layers"], list)
                                  and all(isinstance(x, int) and x in layers for x in a["layers"])
                                  and (a["kind"] == "pal") == bool(a["layers"])):
            raise BundleError(f"{where}: task '{t.name}' adapter {a!r} is not a head or PALs in "
                              "the trunk's layers; re-export the bundle")
        try:
            m.executorch_method(t.name)
        except BundleError as e:
            raise BundleError(f"{where}: {e}") from None
    program = section.all_tasks
    if program is not None:
        runs = [m.executorch_method(t)[0] for t in program.tasks]
        starts = [r for i, r in enumerate(runs) if i == 0 or runs[i - 1] != r]
        if len(starts) != len(set(starts)):
            raise BundleError(f"{where}: runtimes.executorch.all_tasks lists tasks of one "
                              "placement apart; re-export the bundle")


def check_graph_pal(m: Manifest, where: str) -> None:
    """runtimes.onnxruntime.pal, when written, is null or a PAL placement in the trunk's
    layers; so is each of its `graphs`' pal."""
    section = m.runtimes["onnxruntime"]
    assert isinstance(section, OnnxRuntimeSection)
    if section.pal is not None and section.pal != TRUNK_PAL:  # _build_runtimes refuses the string
        check_placement(m, section.pal, f"{where}: runtimes.onnxruntime.pal")
    for name, g in (section.graphs or {}).items():
        field = f"{where}: runtimes.onnxruntime.graphs.{name}"
        if g["pal"] is not None:
            check_placement(m, g["pal"], f"{field}.pal")
        if g["adapter"] != adapter_record(g["pal"]):
            raise BundleError(f"{field}.adapter {g['adapter']!r} is not its pal's adapter; "
                              "re-export the bundle")
    records = [json.dumps(g["adapter"], sort_keys=True) for g in (section.graphs or {}).values()]
    if len(records) != len(set(records)):
        raise BundleError(f"{where}: runtimes.onnxruntime.graphs has two graphs of one adapter; "
                          "re-export the bundle")


def check_placement(m: Manifest, pal: object, field: str) -> None:
    """A PalConfig dict of positive size and heads, in some of the trunk's layers."""
    layers = range(m.trunk.num_layers)
    if not (isinstance(pal, dict) and set(pal) == {"size", "heads", "layers", "share_projections"}
            and all(isinstance(pal[k], int) and pal[k] > 0 for k in ("size", "heads"))
            and isinstance(pal["share_projections"], bool) and isinstance(pal["layers"], list)
            and pal["layers"] and all(isinstance(x, int) and x in layers for x in pal["layers"])):
        raise BundleError(f"{field} {pal!r} is not null or a PAL placement in the trunk's "
                          "layers; re-export the bundle")
