"""The repository layout, the rule that ``tandem`` never shadows stdlib ``operator``, and the
import contracts: one layers contract, and every module that calls itself pure under one."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

TOP_LEVEL = [
    "pyproject.toml",
    "README.md",
    "operator",
    "crds",
    "engine_image",
    "charts",
    "tests",
    "e2e",
    "examples",
    "bench",
    ".ci",
]


@pytest.mark.parametrize("entry", TOP_LEVEL)
def test_top_level_entry_exists(repo_root: Path, entry: str) -> None:
    assert (repo_root / entry).exists(), f"{entry} missing from the repository root"


def test_stdlib_operator_is_not_shadowed_from_repo_root(repo_root: Path) -> None:
    code = "import operator; operator.itemgetter(0)([1]); print(operator.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True
    )
    assert "operator/__init__" not in out.stdout
    assert not out.stdout.strip().startswith(str(repo_root / "operator"))


def test_the_package_is_tandem(repo_root: Path) -> None:
    assert not (repo_root / "operator" / "__init__.py").exists()
    import tandem

    assert Path(tandem.__file__).parent == repo_root / "operator" / "tandem"


def _contracts(repo_root: Path) -> list[dict[str, Any]]:
    config = tomllib.loads((repo_root / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _modules(repo_root: Path) -> dict[str, str]:
    """Every module of the package → the first paragraph of its docstring."""
    out: dict[str, str] = {}
    for path in sorted((repo_root / "operator" / "tandem").rglob("*.py")):
        parts = path.relative_to(repo_root / "operator").with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out[name] = doc.split("\n\n", 1)[0]
    return out


def test_every_module_that_calls_itself_pure_is_under_a_no_io_contract(repo_root: Path) -> None:
    """A docstring that says "Pure" is a promise import-linter keeps, not a comment."""
    no_io = [c for c in _contracts(repo_root) if c["type"] == "forbidden" and "aiohttp" in
             c["forbidden_modules"] and not c.get("allow_indirect_imports")]  # fmt: skip
    sources = {m for c in no_io for m in c["source_modules"]}
    modules = _modules(repo_root)
    pure = [m for m, doc in modules.items() if re.search(r"\bPure\b", doc)]
    assert len(pure) > 50
    uncovered = [m for m in pure if not any(m == s or m.startswith(s + ".") for s in sources)]
    assert not uncovered, f"say Pure but no no-I/O contract covers them: {uncovered}"
    missing = sorted(s for s in sources if s not in modules)
    assert not missing, f"no-I/O contract names modules that do not exist: {missing}"


def test_one_layers_contract_names_every_package(repo_root: Path) -> None:
    layers = [c for c in _contracts(repo_root) if c["type"] == "layers" and not c.get("containers")]
    assert len(layers) == 1
    named = {p.strip() for layer in layers[0]["layers"] for p in layer.split("|")}
    packages = {
        f"tandem.{p.name}"
        for p in (repo_root / "operator" / "tandem").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    assert packages - named == set(), "every package has a layer"
