"""The package's shape: one import namespace, layers that import downward only, modules of a size
a reader can hold, test modules that stand alone."""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from testing_utils import REPO

# What each of palkit's packages may import of palkit's own (README.md, "Layout"); cli.py
# assembles them all.
LAYERS = {
    "core": set(), "runtime": {"core"}, "ui": {"core"}, "quant": set(), "android_demo": set(),
    "trainer": {"core", "ui", "runtime"},
    "export": {"core", "runtime", "ui", "trainer", "quant", "android_demo"},
    "bench": {"core", "runtime", "ui", "trainer", "quant", "android_demo", "export"},
    "report": {"core", "runtime", "ui", "trainer", "export", "bench"},
    "studies": {"core", "ui", "trainer"},
}
OURS = "|".join([*LAYERS, "cli"])
MAX_LINES = 500
# The bundle runtime runs where only onnxruntime, numpy and tokenizers are installed (the arm64
# Python under qemu): none of these at module level, where every importer would pay for them.
RUNTIME_FORBIDS = {"torch", "typer", "rich"}
# The root folder is the package: any other .py there would ship as palkit.<name>.
ROOT_MODULES = {"__init__.py", "cli.py"}


def package_modules() -> list[Path]:
    """The .py files the wheel installs, from pyproject.toml's package list."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert packages["package-dir"] == {"palkit": "."}
    files = [REPO / "__init__.py", REPO / "cli.py"]
    for name in packages["packages"]:
        if name != "palkit":
            files += sorted((REPO / name.removeprefix("palkit.").replace(".", "/")).glob("*.py"))
    return files


def palkit_imports(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:from|import) palkit\.(\w+)", path.read_text(), re.M))


def test_every_package_folder_is_shipped():
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = {f"palkit.{p.parent.relative_to(REPO)}".replace("/", ".")
               for p in REPO.glob("*/**/__init__.py") if "build" not in p.parts}
    assert folders - {"palkit.fuzz"} == set(listed) - {"palkit"}  # fuzz/ stays in the repository


def test_layers_import_downward_only():
    wrong = []
    for path in package_modules():
        package = path.relative_to(REPO).parts[0]
        if package in LAYERS:
            wrong += [f"{path.relative_to(REPO)} imports palkit.{p}"
                      for p in palkit_imports(path) - LAYERS[package] - {package}]
    assert not wrong


def module_level_imports(path: Path) -> set[str]:
    """Top-level names imported when the module loads (not inside functions or classes)."""
    found: set[str] = set()
    body = list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With)):  # still run at import
            body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *[b for h in getattr(node, "handlers", []) for b in h.body]]
    return found


def test_the_runtime_imports_no_torch_typer_or_rich_at_module_level():
    heavy = {str(p.relative_to(REPO)): sorted(module_level_imports(p) & RUNTIME_FORBIDS)
             for p in sorted((REPO / "runtime").glob("*.py"))}
    assert {k: v for k, v in heavy.items() if v} == {}
    assert heavy  # the rule looked at the runtime's modules


def test_no_stray_module_at_the_root():
    assert {p.name for p in REPO.glob("*.py")} == ROOT_MODULES


def test_our_code_is_imported_through_the_namespace_only():
    """`from trainer.x import` works from a checkout's root and nowhere else: every import of
    palkit's code, in the package, its tests, lab/ and fuzz/, names palkit."""
    bare = re.compile(rf"^\s*(?:from|import) (?:{OURS})\b", re.M)
    sources = [*package_modules(), *REPO.glob("tests/*.py"), *REPO.glob("tests/tools/*.py"),
               *REPO.glob("lab/*.py"), *REPO.glob("fuzz/*.py"), *REPO.glob("android_demo/tools/*.py")]
    assert [str(p.relative_to(REPO)) for p in sources if bare.search(p.read_text())] == []


def test_lab_and_fuzz_have_one_name_each():
    """lab/ and fuzz/ live in the checkout only: run from its root as `python -m lab.NAME`, imported
    as lab.NAME (fuzz alike), never as palkit.lab or by path. Records of past runs (CHANGELOG.md,
    docs/records/, results/, reports/) say what was typed then."""
    wrong = re.compile(r"(?:import|from|-m) palkit\.(?:lab|fuzz)\b|python3? (?:lab|fuzz)/\w+\.py")
    history = ("CHANGELOG.md", "docs/records/", "results/", "reports/")
    texts = [p for p in [*REPO.glob("**/*.py"), *REPO.glob("**/*.md")]
             if "build" not in p.relative_to(REPO).parts
             and not str(p.relative_to(REPO)).startswith(history)]
    assert [str(p.relative_to(REPO)) for p in texts if wrong.search(p.read_text())] == []


def test_no_module_of_the_package_is_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in package_modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_test_module_imports_another():
    """Shared helpers live in testing_utils.py and fixtures in conftest.py."""
    imports = re.compile(r"^\s*(?:from|import) (?:tests\b|test_|conftest\b)", re.M)
    assert [p.name for p in REPO.glob("tests/*.py") if imports.search(p.read_text())] == []
