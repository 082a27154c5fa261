"""Simulated engines and routers on loopback for the router's component tests.

Engines run in-process (``tandem.engine.server.create_app``) when a test only needs
their HTTP behaviour, or as ``tandem engine sim`` subprocesses when a test kills one.
Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tandem.engine.server.app import create_app
from tandem.engine.server.config import FaultConfig
from tandem.engine.server.factory import SimOptions, build_server_config
from tandem.router.app import Serving, build_app, start_router
from tandem.router.config import RouterConfig
from tandem.router.discovery import StaticDiscovery
from tandem.router.engine_metrics import parse_engine_gauges
from tandem.router.proxy import ROUTER
from tandem.router.state import Router

MODEL = "sim-model"


@dataclass
class SimEngine:
    """One simulated engine on loopback."""

    url: str
    role: str
    runner: web.AppRunner | None = None
    process: asyncio.subprocess.Process | None = None

    async def stats(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/tandem/stats") as r:
            data: dict[str, Any] = await r.json()
            return data

    async def running(self) -> float:
        """``vllm:num_requests_running`` as the router's scraper reads it."""
        async with aiohttp.ClientSession() as session, session.get(self.url + "/metrics") as r:
            return parse_engine_gauges(await r.text()).running or 0.0

    async def kill(self) -> None:
        """SIGKILL a subprocess engine: its connections reset, its port closes."""
        assert self.process is not None, "only subprocess engines can be killed"
        self.process.send_signal(signal.SIGKILL)
        async with asyncio.timeout(10):
            await self.process.wait()

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None, "only subprocess engines take signals"
        self.process.send_signal(sig)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            async with asyncio.timeout(10):
                await self.process.wait()


def sim_options(role: str, *, faults: FaultConfig | None = None, **server: Any) -> SimOptions:
    return SimOptions(
        role=role,  # type: ignore[arg-type]
        served_model_names=(MODEL,),
        max_model_len=4096,
        faults=faults or FaultConfig(),
        **server,
    )


async def start_sim(role: str, *, faults: FaultConfig | None = None, **server: Any) -> SimEngine:
    """An in-process simulated engine of ``role`` on a free loopback port."""
    app = create_app(build_server_config(sim_options(role, faults=faults, **server)))
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return SimEngine(url=f"http://127.0.0.1:{port}", role=role, runner=runner)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """Linux: the engine gets SIGKILL if the test process dies before cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def spawn_sim(role: str, *extra: str) -> SimEngine:
    """A ``tandem engine sim`` subprocess, once its ``/health`` answers 200."""
    port = free_port()
    command = [sys.executable, "-m", "tandem.cli", "engine", "sim", "--role", role,
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL,
               "--max-model-len", "4096", *extra]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=die_with_parent,
    )
    engine = SimEngine(url=f"http://127.0.0.1:{port}", role=role, process=process)
    await wait_healthy(engine.url, process)
    return engine


async def wait_healthy(
    url: str, process: asyncio.subprocess.Process, timeout_s: float = 30.0
) -> None:
    async with aiohttp.ClientSession() as session:

        async def healthy() -> bool:
            assert process.returncode is None, f"engine at {url} exited: {process.returncode}"
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/health") as resp:
                    return resp.status == 200
            return False

        await poll_until(healthy, timeout_s=timeout_s)


async def poll_until(
    predicate: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0, every_s: float = 0.05
) -> None:
    """Wait until ``predicate()`` holds, at most ``timeout_s`` (then TimeoutError).

    Polling, because what is awaited lives in another process (an engine's gauges).
    """
    async with asyncio.timeout(timeout_s):
        while not await predicate():  # noqa: ASYNC110 - remote state has no event to wait on
            await asyncio.sleep(every_s)


@dataclass
class RouterHandle:
    """A router serving on loopback, and the state behind it."""

    serving: Serving
    router: Router
    engines: list[SimEngine] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.serving.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/metrics") as r:
            return await r.text()


async def start_static_router(config: RouterConfig, urls: dict[str, list[str]]) -> RouterHandle:
    app = build_app(config, StaticDiscovery(urls), seed=1)
    serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=1.0)
    return RouterHandle(serving=serving, router=app[ROUTER])


Factory = Callable[..., Awaitable[RouterHandle]]


@pytest.fixture
async def pd_router() -> AsyncIterator[Factory]:
    """``await pd_router(config, prefill=[...], decode=[...])``; all stopped afterwards.

    Engines are given as role names (started in-process) or :class:`SimEngine`s.
    """
    handles: list[RouterHandle] = []
    started: list[SimEngine] = []

    async def make(
        config: RouterConfig | None = None,
        *,
        prefill: list[SimEngine | str] | None = None,
        decode: list[SimEngine | str] | None = None,
        pool: list[SimEngine | str] | None = None,
    ) -> RouterHandle:
        config = config or RouterConfig(scrape_interval_s=0.2)
        engines: list[SimEngine] = []
        urls: dict[str, list[str]] = {}
        for role, given in (("prefill", prefill), ("decode", decode), ("pool", pool)):
            for item in given or ():
                if isinstance(item, str):
                    engine = await start_sim("aggregated" if role == "pool" else role)
                    started.append(engine)
                else:
                    engine = item
                engines.append(engine)
                urls.setdefault(role, []).append(engine.url)
        handle = await start_static_router(config, urls)
        handle.engines = engines
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        await handle.serving.stop()
    for engine in started:
        await engine.stop()


@pytest.fixture
async def sims() -> AsyncIterator[Callable[..., Awaitable[SimEngine]]]:
    """``await sims(role, faults=..., **server)``: in-process engines stopped afterwards."""
    started: list[SimEngine] = []

    async def make(role: str, *, faults: FaultConfig | None = None, **server: Any) -> SimEngine:
        engine = await start_sim(role, faults=faults, **server)
        started.append(engine)
        return engine

    yield make
    for engine in started:
        await engine.stop()


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
