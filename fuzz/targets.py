"""What the parser fuzzers drive: one function per palkit parser, taking the fuzzer's bytes.

Each target feeds its input to palkit's own reading code the way a file or a user would, and
checks what comes back (a manifest reads back as itself, token ids stay in range...). A target
returns normally or raises a refusal — PalkitError or ValueError, which the CLI prints as one
line; anything else, or a broken invariant (InvariantBroken), is a crash of palkit's code.

Targets build their fixtures (a scratch folder, a vocabulary) once per process: `setup(name)`.
"""
from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import atheris

from palkit.core.errors import PalkitError

REFUSALS = (PalkitError, ValueError)
SEEDS = Path(__file__).parent / "seeds"
GOLDEN = Path(__file__).parents[1] / "android_demo/core/src/test/resources/signing"


class InvariantBroken(AssertionError):
    """The parser accepted the input but what it returned is wrong (`what`: which rule)."""

    def __init__(self, what: str, detail: str = ""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what


def scratch() -> Path:
    """A private folder on a RAM disk when there is one (each input is written to a file)."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="palkit-fuzz-", dir=shm if shm.is_dir() else None))


# ---- structured edits: JSON documents mutated where a parser reads them ----------------------

def json_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            paths += json_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            paths += json_paths(v, prefix + (i,))
    return paths


def random_value(fdp: atheris.FuzzedDataProvider, doc: Any, paths: list[tuple]) -> Any:
    """A value of another JSON type, an awkward string, or a copy of another part of `doc`."""
    choice = fdp.ConsumeIntInRange(0, 9)
    if choice == 3:
        return fdp.ConsumeInt(8)
    if choice == 4:
        return fdp.ConsumeRegularFloat()
    if choice == 5:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
    if choice == 9:
        node = doc
        for key in paths[fdp.ConsumeIntInRange(0, len(paths) - 1)]:
            node = node[key]
        return copy.deepcopy(node)
    return [None, True, False, None, None, None, [], {}, "../../etc/passwd"][choice]


def edit_json(doc: Any, fdp: atheris.FuzzedDataProvider) -> Any:
    """Up to 4 edits at random places of a copy of `doc`: replace a value, or delete a key."""
    doc = copy.deepcopy(doc)
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        paths = json_paths(doc)
        path = paths[fdp.ConsumeIntInRange(0, len(paths) - 1)]
        if not path:
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and fdp.ConsumeBool():
            del parent[path[-1]]
        else:
            parent[path[-1]] = random_value(fdp, doc, paths)
    return doc


def structured_or_raw(data: bytes, seed: Any) -> bytes:
    """First byte even: the raw bytes; odd: JSON edits of the seed document."""
    if not data or data[0] % 2 == 0:
        return data[1:]
    fdp = atheris.FuzzedDataProvider(data[1:])
    return json.dumps(edit_json(seed, fdp)).encode()


# ---- manifest.json ---------------------------------------------------------------------------

class ManifestTarget:
    def __init__(self) -> None:
        from palkit.runtime import manifest
        self.m = manifest
        self.folder = scratch()
        self.seed = json.loads((SEEDS / "manifest" / "real.json").read_text())

    def __call__(self, data: bytes) -> None:
        (self.folder / self.m.MANIFEST_FILE).write_bytes(structured_or_raw(data, self.seed))
        m = self.m.read_manifest(self.folder)
        needed = m.files_for()
        for rel, owner in needed.items():
            self.m.safe_path(self.folder, rel, owner)
        for r in m.runtime_names:
            m.trunk_file(r)
        again = self.m.manifest_from_dict(json.loads(json.dumps(m.to_dict())), "round trip")
        if again != m:
            raise InvariantBroken("a manifest read and written back reads differently")


# ---- training config files (.json / .toml) and the tasks they describe -----------------------

class ConfigTarget:
    def __init__(self) -> None:
        from palkit.trainer import config, tasks
        self.config, self.tasks = config, tasks
        self.folder = scratch()
        self.seed = json.loads((SEEDS / "config" / "custom.json").read_text())

    def __call__(self, data: bytes) -> None:
        toml = bool(data) and data[0] % 4 == 2   # raw bytes as .toml a quarter of the time
        path = self.folder / ("config.toml" if toml else "config.json")
        path.write_bytes(data[1:] if toml else structured_or_raw(data, self.seed))
        cfg = self.config.build_config({}, str(path))
        specs = self.tasks.resolve_tasks(cfg.tasks, cfg.custom_tasks)
        if [s.name for s in specs] != list(cfg.tasks):
            raise InvariantBroken("resolve_tasks returned other tasks than the config names")


class TaskSpecTarget:
    """A task described in a config's custom_tasks (or a bundle's tasks[].spec)."""

    def __init__(self) -> None:
        from palkit.trainer.tasks import BUILTIN_TASKS, TaskSpec
        self.TaskSpec = TaskSpec
        self.seed = BUILTIN_TASKS["sts"].to_dict()

    def __call__(self, data: bytes) -> None:
        raw = structured_or_raw(data, self.seed)
        try:
            d = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return  # not a document: the config reader refuses it before TaskSpec sees it
        spec = self.TaskSpec.from_dict(d) if isinstance(d, dict) else None
        if spec is not None and self.TaskSpec.from_dict(spec.to_dict()) != spec:
            raise InvariantBroken("a task spec read and written back reads differently")


class TaskDataTarget:
    """A task's data file (tab-separated, header row) read by trainer.data.read_examples."""

    def __init__(self) -> None:
        from palkit.trainer.data import read_examples
        from palkit.trainer.tasks import BUILTIN_TASKS
        self.read, self.tasks = read_examples, list(BUILTIN_TASKS.values())
        self.folder = scratch()

    def __call__(self, data: bytes) -> None:
        if not data:
            return
        task = self.tasks[data[0] % len(self.tasks)]
        (self.folder / task.files["dev"]).parent.mkdir(parents=True, exist_ok=True)
        (self.folder / task.files["dev"]).write_bytes(data[1:])
        mode = "skip" if data[0] & 0x80 else "stop"
        for e in self.read(task, self.folder, "dev", bad_rows=mode):
            if len(e.texts) != len(task.text_columns) or not all(t.strip() for t in e.texts):
                raise InvariantBroken("an example with missing or empty texts was accepted")


# ---- the host tokenizer ----------------------------------------------------------------------

class TokenizerTarget:
    def __init__(self) -> None:
        from palkit.runtime.manifest import TokenizerSettings
        from palkit.runtime.tokenizer import Tokenizer
        vocab = SEEDS / "tokenizer" / "vocab.txt"
        self.size = len(vocab.read_text(encoding="utf-8").splitlines())
        self.tokenizers = {n: Tokenizer(TokenizerSettings("vocab.txt", True, True, n, "[CLS]",
                                                          "[SEP]", "[PAD]", "[UNK]", "[MASK]",
                                                          100), vocab) for n in (2, 3, 16, 128)}

    def __call__(self, data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        max_length = (2, 3, 16, 128)[fdp.ConsumeIntInRange(0, 3)]
        text = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 300))  # surrogates included
        pair = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 300)) if fdp.ConsumeBool() else None
        ids, mask, types = self.tokenizers[max_length](text, pair, warn=False)
        detail = f"max_length {max_length}, {text!r} / {pair!r} -> {ids.tolist()}"
        if not 2 <= ids.shape[1] <= max_length:
            raise InvariantBroken("token count outside 2..max_length", detail)
        if not (ids.shape == mask.shape == types.shape and ids.shape[0] == 1
                and (ids >= 0).all() and (ids < self.size).all() and (mask == 1).all()):
            raise InvariantBroken("ids, mask or types malformed", detail)
        if ids[0, 0] != 2 or ids[0, -1] != 3:  # [CLS] ... [SEP] (ids in seeds/tokenizer/vocab)
            raise InvariantBroken("sequence not framed by [CLS] ... [SEP]", detail)
        if pair is None and types.any():
            raise InvariantBroken("a single text got token type 1", detail)


# ---- model.sig -------------------------------------------------------------------------------

class SignatureTarget:
    """The signature file of a bundle, read by runtime/signing.py before anything else."""

    def __init__(self) -> None:
        from palkit.runtime import signing
        self.signing = signing
        self.folder = scratch() / "bundle"
        shutil.copytree(GOLDEN / "valid", self.folder)
        self.seed = json.loads((self.folder / signing.SIGNATURE_FILE).read_text())
        self.key = GOLDEN / "keys" / "signer.pub.pem"

    def __call__(self, data: bytes) -> None:
        sig = self.folder / self.signing.SIGNATURE_FILE
        sig.write_bytes(structured_or_raw(data, self.seed))
        self.signing.verify_bundle_signature(self.folder, self.key, check_files=bool(data)
                                             and data[-1] % 2 == 0)


TARGETS: dict[str, Callable[[], Callable[[bytes], None]]] = {
    "manifest": ManifestTarget, "config": ConfigTarget, "task_spec": TaskSpecTarget,
    "task_data": TaskDataTarget, "tokenizer": TokenizerTarget, "signature": SignatureTarget}
# The palkit modules each target instruments for coverage.
MODULES = {"manifest": ["palkit.runtime.manifest"],
           "config": ["palkit.trainer.config", "palkit.trainer.tasks"],
           "task_spec": ["palkit.trainer.tasks"], "task_data": ["palkit.trainer.data"],
           "tokenizer": ["palkit.runtime.tokenizer"], "signature": ["palkit.runtime.signing"]}
