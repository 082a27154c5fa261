"""The pure engine model imports no I/O, no asyncio and no clock."""

from __future__ import annotations

import ast
from pathlib import Path

import tandem.engine.model as model_pkg

FORBIDDEN = {
    "aiohttp",
    "asyncio",
    "datetime",
    "kopf",
    "kubernetes",
    "kubernetes_asyncio",
    "os",
    "prometheus_client",
    "random",
    "socket",
    "time",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_model_package_imports_nothing_impure() -> None:
    files = sorted(Path(model_pkg.__file__).parent.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in _imports(path):
            root = name.split(".")[0]
            assert root not in FORBIDDEN, f"{path.name} imports {name}"
            assert not name.startswith("tandem.") or name.startswith("tandem.engine.model"), (
                f"{path.name} imports {name} from outside the pure model"
            )
