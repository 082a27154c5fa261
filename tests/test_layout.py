"""The repository layout and the rule that ``tandem`` never shadows stdlib ``operator``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
