"""Fixtures for tandem.kube against the emulated API server over loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tandem.kube import KubeClient
from tests.support import Emulator, emulator_url, serve_emulator


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


@pytest.fixture
async def client(k: Emulator) -> AsyncIterator[KubeClient]:
    kube = KubeClient.for_url(emulator_url(k), user_agent="tandem-test", timeout_s=2.0)
    yield kube
    await kube.close()
