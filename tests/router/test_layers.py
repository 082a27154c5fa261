"""The router's pure modules import no I/O library (aiohttp, kubernetes, prometheus)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE = ["config", "classes", "selection", "pools", "protocol", "engine_metrics", "pods"]
FORBIDDEN = ("aiohttp", "kubernetes", "kubernetes_asyncio", "prometheus_client", "kopf")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library(repo_root: Path, module: str) -> None:
    path = repo_root / "operator" / "tandem" / "router" / f"{module}.py"
    for name in imported_modules(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{module} imports {name}"
        if name.startswith("tandem.router."):
            assert name.removeprefix("tandem.router.") in PURE, f"{module} imports {name}"
