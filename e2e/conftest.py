"""End-to-end tests need a real cluster: every test here is skipped when KUBECONFIG is unset,
except the control-plane harness's own (``e2e/cluster/``), which starts one."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBECONFIG"):
        return
    skip = pytest.mark.skip(reason="needs a real cluster: set KUBECONFIG")
    for item in items:
        path = str(item.fspath)
        if "/e2e/" in path and "/e2e/cluster/" not in path:
            item.add_marker(skip)
