"""Fixtures for simulated-server tests: factories for configs and live loopback servers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tandem.engine.server import SimServerConfig, build_server_config, create_app
from tandem.engine.server.factory import SimOptions
from tandem.engine.server.keys import STATE_KEY
from tandem.engine.server.state import ServerState

MODEL_NAME = "sim-model"

StartServer = Callable[..., Awaitable[TestClient[Any, Any]]]


def make_config(role: str = "aggregated", **kw: Any) -> SimServerConfig:
    """A fast config: simulated time runs 50x faster than wall time, 4k context."""
    kw.setdefault("speedup", 50.0)
    opts = SimOptions(
        role=role,  # type: ignore[arg-type]
        served_model_names=(MODEL_NAME,),
        num_gpu_blocks=kw.pop("num_gpu_blocks", 2048),
        max_model_len=kw.pop("max_model_len", 4096),
        **kw,
    )
    return build_server_config(opts)


@pytest.fixture
def start_server(aiohttp_client: Any) -> StartServer:
    """``await start_server(role=..., **SimOptions fields)`` -> a client of a live server."""

    async def factory(role: str = "aggregated", **kw: Any) -> TestClient[Any, Any]:
        client: TestClient[Any, Any] = await aiohttp_client(create_app(make_config(role, **kw)))
        return client

    return factory


def state_of(client: TestClient[Any, Any]) -> ServerState:
    app = client.app
    assert app is not None
    state: ServerState = app[STATE_KEY]
    return state
