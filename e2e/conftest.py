"""End-to-end tests need a real cluster: every test here is skipped when KUBECONFIG is unset,
except those on the control-plane harness (``e2e/cluster/`` and any test using its
``cluster`` fixture), which start one."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBECONFIG"):
        return
    skip = pytest.mark.skip(reason="needs a real cluster: set KUBECONFIG")
    for item in items:
        path = str(item.fspath)
        # Tests on the harness's own cluster (the `cluster` fixture) start one themselves.
        uses_harness = "cluster" in getattr(item, "fixturenames", ())
        if "/e2e/" in path and "/e2e/cluster/" not in path and not uses_harness:
            item.add_marker(skip)
