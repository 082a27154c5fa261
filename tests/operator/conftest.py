"""Fixtures of the operator component tests: an emulator per test, operators on demand."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.support import Emulator, emulator_url, serve_emulator
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, start_operator, wait_ready

ISVCS = "/apis/serving.tandem.dev/v1alpha1/namespaces/{ns}/inferenceservices"


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


@pytest.fixture
async def api(k: Emulator) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, emulator_url(k))


@pytest.fixture
async def operators(k: Emulator) -> AsyncIterator[Callable[..., Any]]:
    """``await operators(identity="a", **config)`` starts one; all stop at teardown."""
    started: list[RunningOperator] = []

    async def start(identity: str = "op", *, wait: bool = True, **kwargs: Any) -> RunningOperator:
        op = start_operator(emulator_url(k), identity=identity, **kwargs)
        started.append(op)
        if wait:
            running = sum(1 for o in started if o.leading())
            await wait_ready(op, k, watches=max(1, running))
        return op

    yield start
    for op in started:
        if op.leading():  # stopping Kopf in the middle of its startup costs seconds
            await wait_ready(op, k)
        await op.stop()


@pytest.fixture
async def op(operators: Callable[..., Any]) -> RunningOperator:
    result: RunningOperator = await operators()
    return result
