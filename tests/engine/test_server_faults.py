"""Fault injection: errors, hangs, crashes."""

from __future__ import annotations

import asyncio

import pytest

from tandem.engine.server.config import FaultConfig

from .conftest import StartServer, state_of


async def test_error_rate_one_fails_every_request(start_server: StartServer) -> None:
    client = await start_server(faults=FaultConfig(error_rate=1.0, error_status=503))
    resp = await client.post("/v1/completions", json={"prompt": "x"})
    assert resp.status == 503
    assert (await resp.json())["error"]["type"] == "ServiceUnavailableError"
    assert (await client.get("/health")).status == 200


async def test_error_rate_is_a_seeded_fraction(start_server: StartServer) -> None:
    client = await start_server(faults=FaultConfig(error_rate=0.5, seed=3))
    statuses = [
        (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status
        for _ in range(20)
    ]
    assert 3 <= statuses.count(500) <= 17 and statuses.count(200) + statuses.count(500) == 20


async def test_hang_never_answers_and_is_aborted_on_disconnect(start_server: StartServer) -> None:
    client = await start_server(faults=FaultConfig(hang_rate=1.0))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.post("/v1/completions", json={"prompt": "x"}), 0.2)
    assert state_of(client).engine.num_waiting == 0  # a hung request never reached the engine


async def test_crash_after_n_requests(start_server: StartServer) -> None:
    crashed: list[bool] = []
    client = await start_server(faults=FaultConfig(crash_after=1), speedup=1.0)
    state = state_of(client)
    state.on_crash = lambda: crashed.append(True)
    inflight = await client.post(
        "/v1/completions", json={"prompt": "x", "max_tokens": 1000, "stream": True}
    )
    await inflight.content.readline()
    second = await client.post("/v1/completions", json={"prompt": "y"})
    assert second.status == 500 and crashed == [True]
    rest = (await inflight.read()).decode()
    assert '"InternalServerError"' in rest and rest.endswith("data: [DONE]\n\n")
    assert (await client.get("/health")).status == 503
    assert (await client.post("/v1/completions", json={"prompt": "z"})).status == 500
