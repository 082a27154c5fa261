"""End-to-end tests need a real cluster: every test here is skipped when KUBECONFIG is unset."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBECONFIG"):
        return
    skip = pytest.mark.skip(reason="needs a real cluster: set KUBECONFIG")
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(skip)
