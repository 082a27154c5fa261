"""What every answer carries (X-Request-Id) and what none does (engine addresses, OS
errors), on loopback against simulated engines."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

import aiohttp
import pytest

from tandem.router.config import ClassConfig, RouterConfig, Timeouts
from tests.router.conftest import MODEL, Factory, free_port, poll_until, spawn_sim

pytestmark = pytest.mark.asyncio

BOUND_S = 30.0
SHORT = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
#: What must never reach a client: an address with a port, an OS error number.
INTERNALS = re.compile(r"\d+\.\d+\.\d+\.\d+|:\d{2,5}\b|errno|Errno|\[Connect call")


async def answer(
    session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> tuple[int, str | None, bytes]:
    async with asyncio.timeout(BOUND_S), session.request(method, url, **kwargs) as resp:
        return resp.status, resp.headers.get("X-Request-Id"), await resp.read()


async def test_every_answer_carries_a_request_id(pd_router: Factory) -> None:
    config = RouterConfig(
        max_inflight=1,
        max_body_bytes=1024,
        classes=(ClassConfig("interactive"), ClassConfig("batch")),
        default_class="interactive",
        scrape_interval_s=0.2,
    )
    handle = await pd_router(config, prefill=["prefill"], decode=["decode"])
    url = handle.url
    long = {**SHORT, "max_tokens": 3000, "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=long) as held:  # holds the slot
            assert held.status == 200
            await held.content.readany()
            status, rid, _ = await answer(session, "POST", url + "/v1/completions", json=SHORT)
            assert (status, bool(rid)) == (429, True)
            held.close()
        await poll_until(_idle(handle), timeout_s=BOUND_S)
        cases: list[tuple[str, str, dict[str, Any], int]] = [
            ("POST", "/v1/completions", {"data": b"x" * 2048}, 413),
            ("POST", "/v1/completions", {"json": SHORT,
                                         "headers": {config.priority_header: "vip"}}, 400),
            ("POST", "/v1/completions", {"data": b"not json"}, 400),
            ("GET", "/v1/models", {}, 200),
            ("GET", "/health", {}, 200),
            ("GET", "/metrics", {}, 200),
            ("GET", "/no/such/path", {}, 404),
            ("GET", "/v1/completions", {}, 405),
            ("POST", "/v1/completions", {"json": SHORT}, 200),
        ]  # fmt: skip
        for method, path, kwargs, expected in cases:
            status, rid, body = await answer(session, method, url + path, **kwargs)
            assert status == expected, (path, body)
            assert rid, f"{method} {path} ({status}) has no X-Request-Id"
        mine = {"X-Request-Id": "client-chosen-42"}
        for method, path in (("GET", "/v1/models"), ("GET", "/no/such/path")):
            _, rid, _ = await answer(session, method, url + path, headers=mine)
            assert rid == "client-chosen-42"


def _idle(handle: Any) -> Any:
    async def idle() -> bool:
        return bool(handle.router.admission.total == 0)

    return idle


def fast() -> RouterConfig:
    timeouts = Timeouts(connect_s=0.5, prefill_s=1.0, first_token_s=1.0, idle_stream_s=0.5)
    return RouterConfig(timeouts=timeouts, scrape_interval_s=0.2, prefix_affinity_tokens=0)


async def test_error_messages_name_no_engine_address_or_os_error(pd_router: Factory) -> None:
    """Unreachable engines, a stalled stream, /v1/models without an engine: each message
    says what failed in the router's words; the address and errno go to the log only."""
    closed = f"http://127.0.0.1:{free_port()}"
    decode = await spawn_sim("decode")
    try:
        handle = await pd_router(fast(), prefill=["prefill"], decode=[decode])
        url = handle.url
        messages: list[str] = []
        async with aiohttp.ClientSession() as session:
            body = {**SHORT, "max_tokens": 4000, "stream": True}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.content.readany()
                decode.signal(signal.SIGSTOP)  # alive but silent: the stream stalls
                raw = await resp.read()
            decode.signal(signal.SIGCONT)
            events = [e for e in raw.split(b"\n\n") if e.startswith(b'data: {"error"')]
            messages.append(json.loads(events[-1][6:])["error"]["message"])
            handle.router.set_pool_urls("decode", [closed])
            handle.router.set_pool_urls("prefill", [closed])
            for path, method, kwargs in (
                ("/v1/completions", "POST", {"json": SHORT}),
                ("/v1/models", "GET", {}),
            ):
                status, _, raw = await answer(session, method, url + path, **kwargs)
                assert status >= 500, raw
                messages.append(json.loads(raw)["error"]["message"])
        assert messages[0] == "the decode engine sent nothing for 0.5 s"
        assert messages[1] == "the decode engine could not be reached"
        for message in messages:
            assert not INTERNALS.search(message), message
    finally:
        await decode.stop()
