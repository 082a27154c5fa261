"""A local pool that shrinks drains as a terminating pod does: out of the router first,
then its streams finish (bounded by ``engine.shutdownTimeout``), then it stops.

Over real processes: ``tandem engine sim`` engines behind the in-process router on
loopback, the fleet driven directly (no autoscaler), streams read as a client would.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.local.engines import EngineLaunch
from tandem.local.fleet import LocalFleet
from tandem.local.processes import EnginePod
from tandem.router.app import build_app, start_router
from tandem.router.config import build_router_config
from tandem.router.discovery import StaticDiscovery
from tandem.router.proxy import ROUTER
from tandem.router.state import Router
from tests.factories import make_manifest

#: Tokens per stream: about 20 s on the simulated L40S, twice the fixed 10 s after which
#: engines used to be killed.
STREAM_TOKENS = 1000
STREAMS = 12


def _service(shutdown_timeout: str) -> InferenceService:
    manifest = make_manifest(
        "drain",
        backend="sim",
        prefill_max=1,
        decode_max=2,
        policy="static",
        engine={"backend": "sim", "shutdownTimeout": shutdown_timeout},
    )
    spec = manifest["spec"]
    spec["model"]["maxModelLen"] = 4096
    spec["decode"]["replicas"] = {"min": 1, "max": 2, "initial": 2}
    for role in ("prefill", "decode"):
        spec[role]["gpu"] = {"count": 1, "type": "L40S"}
    return load_inference_service(manifest)


@dataclass
class Fleet:
    fleet: LocalFleet
    router: Router
    url: str


@pytest.fixture
async def running(request: pytest.FixtureRequest) -> AsyncIterator[Fleet]:
    isvc = _service(request.param)
    app = build_app(build_router_config(isvc), StaticDiscovery({r: [] for r in isvc.spec.pools()}))
    serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=5.0)
    t0 = time.monotonic()
    fleet = LocalFleet(
        isvc, EngineLaunch("sim", sys.executable, 0.0), lambda: time.monotonic() - t0,
        app[ROUTER].set_pool_urls,
    )  # fmt: skip
    try:
        await fleet.scale("prefill", 1)
        await fleet.scale("decode", 2)
        async with aiohttp.ClientSession() as session:
            for _ in range(150):
                await fleet.refresh(session)
                if len(fleet.ready("prefill")) == 1 and len(fleet.ready("decode")) == 2:
                    break
                await asyncio.sleep(0.2)
        assert len(fleet.ready("decode")) == 2, fleet.failures
        yield Fleet(fleet, app[ROUTER], f"http://127.0.0.1:{serving.port}")
    finally:
        await serving.stop()
        await fleet.close()


@dataclass
class Stream:
    tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False


async def _stream(session: aiohttp.ClientSession, url: str, out: Stream) -> None:
    body = {"model": "llama", "prompt": "tell me a long story", "max_tokens": STREAM_TOKENS,
            "stream": True}  # fmt: skip
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for line in resp.content:
            if line.startswith(b"data: [DONE]"):
                out.done = True
            elif line.startswith(b"data: {"):
                event: dict[str, Any] = json.loads(line[6:])
                if "error" in event:
                    out.error = str(event["error"].get("message"))
                for choice in event.get("choices") or []:
                    out.tokens += bool(choice.get("text"))
                    out.finish_reason = choice.get("finish_reason") or out.finish_reason


async def _running_requests(session: aiohttp.ClientSession, pod: EnginePod) -> float:
    async with session.get(f"{pod.url}/metrics") as resp:
        text = await resp.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("vllm:num_requests_running", "vllm_num_requests_running"))
    )


async def _shrink_during_streams(f: Fleet) -> tuple[list[Stream], EnginePod]:
    """Start the streams, scale decode 2 → 1 while every one is running, and wait for
    them; the streams and the pod that left."""
    streams = [Stream() for _ in range(STREAMS)]
    timeout = aiohttp.ClientTimeout(total=180)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [asyncio.create_task(_stream(session, f.url, s)) for s in streams]
        for _ in range(300):
            if all(s.tokens >= 5 for s in streams):
                break
            await asyncio.sleep(0.1)
        assert all(s.tokens >= 5 for s in streams), "the streams never started"
        leaving = f.fleet.pods["decode"][0]
        assert await _running_requests(session, leaving) >= 1, "no stream on the pod leaving"
        await f.fleet.scale("decode", 1)
        assert leaving not in f.fleet.pods["decode"] and f.fleet.draining() == 1
        assert leaving.url not in f.fleet.targets()["decode"].pods.values()
        router_urls = list(f.router.pools["decode"].endpoints)
        assert leaving.url not in router_urls, "the router still sends to the leaving pod"
        await asyncio.gather(*tasks)
    for _ in range(300):  # its process is reaped once drained
        if f.fleet.draining() == 0:
            break
        await asyncio.sleep(0.1)
    return streams, leaving


@pytest.mark.parametrize("running", ["2m"], indirect=True)
async def test_long_streams_during_a_scale_down_all_complete(running: Fleet) -> None:
    """Issue 16 item 12: the engine used to get SIGTERM at once and SIGKILL 10 s later
    whatever ``engine.shutdownTimeout`` said, cutting the streams it served."""
    streams, leaving = await _shrink_during_streams(running)
    cut = [s for s in streams if s.error or s.finish_reason != "length"]
    assert not cut, f"{len(cut)} of {STREAMS} streams cut: {cut[:3]}"
    assert all(s.tokens == STREAM_TOKENS and s.done for s in streams)
    assert running.fleet.draining() == 0 and leaving.process.returncode is not None
    assert leaving.ended_s is not None
    lives = [life for life in running.fleet.lives() if life.role == "decode"]
    assert len(lives) == 2  # the pod that left counts until it was reaped


@pytest.mark.parametrize("running", ["2s"], indirect=True)
async def test_a_drain_is_bounded_by_the_shutdown_timeout(running: Fleet) -> None:
    """Streams longer than the drain allows are cut cleanly (an SSE error and
    ``[DONE]``), the pod is gone, and the streams of the pod that stays complete."""
    streams, leaving = await _shrink_during_streams(running)
    complete = [s for s in streams if s.finish_reason == "length" and s.tokens == STREAM_TOKENS]
    cut = [s for s in streams if s not in complete]
    assert cut, "a 2 s drain let every 20 s stream finish"
    assert complete, "the pod that stays cut its streams too"
    assert all(s.done for s in streams), "a cut stream did not end with [DONE]"
    assert leaving.process.returncode is not None and running.fleet.draining() == 0
