"""Fixtures for the emulator's own tests: one emulator per test, a JSON client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support import Emulator, emulator_url, serve_emulator
from tests.support.api_client import Api

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


@pytest.fixture
async def api(k: Emulator) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, emulator_url(k))


def deployment(name: str = "web", replicas: int | None = 1, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, **labels}},
        "spec": spec,
    }
