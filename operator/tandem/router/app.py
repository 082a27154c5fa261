"""The router's aiohttp application: factory, typed state, background tasks, serving.

:func:`build_app` wires the handlers of :mod:`tandem.router.proxy` to one
:class:`~tandem.router.state.Router`; the HTTP client, discovery and the metrics
scraper start and stop in ``cleanup_ctx``. :func:`start_router` serves it with handler
cancellation on, so a client that disconnects cancels its request all the way to the
engine. Does I/O (it is the shell).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from tandem.router.config import RouterConfig
from tandem.router.discovery import Discovery
from tandem.router.proxy import (
    ROUTER,
    handle_chat,
    handle_completions,
    handle_health,
    handle_metrics,
    handle_models,
    handle_responses,
)
from tandem.router.scrape import scrape_forever
from tandem.router.state import Router
from tandem.router.surface import add_surface_routes
from tandem.router.tracing import Tracing, trace_middleware

log = logging.getLogger("tandem.router")

DISCOVERY: web.AppKey[Discovery] = web.AppKey("discovery", Discovery)


def build_app(
    config: RouterConfig,
    discovery: Discovery,
    *,
    seed: int | None = None,
    tracing: Tracing | None = None,
) -> web.Application:
    """A router app; nothing runs until it is started. ``tracing``: export spans of every
    request (:mod:`tandem.router.tracing`); it is shut down (flushed) with the app."""
    app = web.Application()
    app[ROUTER] = Router(config, seed=seed)
    if tracing is not None:
        app.middlewares.append(trace_middleware(tracing))
        app.on_cleanup.append(lambda _: asyncio.to_thread(tracing.shutdown))
    app[DISCOVERY] = discovery
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/responses", handle_responses)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/metrics", handle_metrics)
    add_surface_routes(app)
    app.cleanup_ctx.append(_http_client)
    app.cleanup_ctx.append(_discovery)
    app.cleanup_ctx.append(_scraper)
    return app


async def _http_client(app: web.Application) -> AsyncIterator[None]:
    router = app[ROUTER]
    await router.open()
    yield
    await router.close()


async def _discovery(app: web.Application) -> AsyncIterator[None]:
    router, discovery = app[ROUTER], app[DISCOVERY]
    await discovery.start(router)
    task = asyncio.create_task(discovery.run(router), name="router-discovery")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await discovery.close()


async def _scraper(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(scrape_forever(app[ROUTER]), name="router-scraper")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass
class Serving:
    """A started router: its runner and the port it listens on."""

    runner: web.AppRunner
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_router(
    app: web.Application, host: str, port: int, *, shutdown_timeout_s: float = 60.0
) -> Serving:
    """Serve ``app`` on ``host:port`` (0: any free port) until :meth:`Serving.stop`."""
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_timeout_s,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    return Serving(runner=runner, port=int(runner.addresses[0][1]))


async def serve_until_signalled(app: web.Application, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, then drain: stop listening, let requests finish.

    The drain lasts up to the idle-stream timeout (the pod's termination grace period
    is that plus 30 s), after which remaining streams are cut.
    """
    config = app[ROUTER].config
    serving = await start_router(app, host, port, shutdown_timeout_s=config.timeouts.idle_stream_s)
    log.info("router listening on %s:%d (%s)", host, serving.port, config.mode)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("draining")
    finally:
        await serving.stop()
