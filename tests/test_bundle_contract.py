"""One bundle contract (runtime/contract.py, from the reader's dataclasses): BUNDLE.md's key table
and example, the Android app's key list, its parser, kinds and version all agree with it.

Fast: text and a hand-made manifest, no export (tests/test_export_bundle.py checks an exported
manifest against the app's key list).
"""
from __future__ import annotations

import json
import re

from palkit.runtime.contract import manifest_keys, markdown_table
from palkit.runtime.kinds import TASK_KINDS
from palkit.runtime.manifest import FORMAT, VERSION
from testing_utils import ANDROID_DEMO, REPO

BUNDLE_MD = (REPO / "runtime" / "BUNDLE.md").read_text()
APP_KEYS = json.loads((ANDROID_DEMO / "manifest_keys.json").read_text())
APP_BUNDLE = ANDROID_DEMO / "core/src/main/java/io/palkit/core/bundle"
CONTRACT = {k.path: k for k in manifest_keys()}


def app_path(key: str) -> str:
    """The app's key list names runtimes where the contract says <runtime>."""
    return re.sub(r"^tasks\[\]\.files\.\w+$", "tasks[].files.<runtime>", key)


def json_paths(value: object, prefix: str = "") -> set[str]:
    """The contract paths of a manifest's keys; the insides of free-form objects left out."""
    if isinstance(value, list):
        return set().union(*[json_paths(v, f"{prefix}[]") for v in value]) if value else set()
    if not isinstance(value, dict) or prefix in CONTRACT and not any(
            p.startswith(prefix + ".") for p in CONTRACT):
        return set()
    paths = set()
    for key, v in value.items():
        path = (f"{prefix}.<path>" if prefix == "files" else
                f"{prefix}.<runtime>" if prefix == "tasks[].files" else
                f"{prefix}.{key}" if prefix else key)
        paths |= {path} | json_paths(v, path)
    return paths


def test_bundle_md_key_table_is_the_contract():
    table = BUNDLE_MD.split("<!-- manifest keys: begin")[1].split("-->\n", 1)[1]
    assert table.split("<!-- manifest keys: end -->")[0] == markdown_table(), \
        "regenerate the table: python -m palkit.runtime.contract"


def test_bundle_md_example_uses_only_contract_keys_and_every_required_one():
    example = json.loads(BUNDLE_MD.split("```json\n")[1].split("```")[0])
    used = json_paths(example)
    assert used - set(CONTRACT) == set()
    required = {p for p, k in CONTRACT.items() if k.required}
    # each required key is in the example, or sits under an optional key the example leaves out
    missing = {p for p in required - used
               if all(CONTRACT[a].required for a in CONTRACT if p.startswith(a + "."))}
    assert missing == set()


def test_bundle_md_names_the_version_and_every_kind():
    assert BUNDLE_MD.startswith(f"# The palkit bundle (format version {VERSION})")
    kinds = BUNDLE_MD.split("Task kinds:")[1].split("\n\n")[0]
    assert [k for k in TASK_KINDS if f"`{k}`" not in kinds] == []


def test_the_app_reads_contract_keys_and_requires_only_what_is_always_written():
    app = {app_path(k) for k in APP_KEYS["required"] + APP_KEYS["optional"]}
    assert app - set(CONTRACT) == set()
    optional = [p for p, k in CONTRACT.items() if not k.required]
    for key in map(app_path, APP_KEYS["required"]):
        # required by the app: the reader requires it too, or its optional parent (a runtime)
        parents = [p for p in optional if key.startswith(p + ".")]
        assert CONTRACT[key].required and all(p.startswith("runtimes.") for p in parents), key


def test_the_app_parser_reads_no_key_missing_from_its_key_list():
    parser = (APP_BUNDLE / "ManifestParser.java").read_text()
    read = set(re.findall(r'\b(?:string|strings|has|object|bool|list|raw|integer|intAtLeast|'
                          r'readNames\(\w+,)\s*\(?"(\w+)"', parser))
    listed = {part.removesuffix("[]") for k in APP_KEYS["required"] + APP_KEYS["optional"]
              for part in k.split(".")}
    # inside the free-form objects: placements (trunk.pal, tasks[].adapter, methods' and graphs'
    # adapters) and the ONNX graphs' entries (runtimes.onnxruntime.graphs.<name>.model)
    free_form = {"layers", "model"}
    assert read, "no key read found: has the parser's style changed?"
    assert read - listed - free_form == set()


def test_the_app_has_the_format_version_and_kinds_of_the_contract():
    manifest = (APP_BUNDLE / "Manifest.java").read_text()
    assert re.search(rf'FORMAT\s*=\s*"{FORMAT}"', manifest)
    assert re.search(rf"VERSION\s*=\s*{VERSION}\b", manifest)
    kinds = re.findall(r'^\s*[A-Z_]+\("(\w+)"', (APP_BUNDLE / "TaskKind.java").read_text(), re.M)
    assert kinds == list(TASK_KINDS)
