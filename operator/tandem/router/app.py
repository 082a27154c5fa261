"""The router's aiohttp application: factory, typed state, background tasks, serving.

:func:`build_app` wires the handlers of :mod:`tandem.router.proxy` to one
:class:`~tandem.router.state.Router`; the HTTP client, discovery and the metrics
scraper start and stop in ``cleanup_ctx``. :func:`start_router` serves it with handler
cancellation on, so a client that disconnects cancels its request all the way to the
engine, and with every client connection under the app's
:class:`~tandem.router.connections.ConnectionGuard` (the listener is the router's own
``asyncio`` server around aiohttp's protocol factory). Does I/O (it is the shell).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.http import HttpProcessingError

from tandem.router.config import RouterConfig
from tandem.router.connections import CONNECTIONS, ConnectionGuard, connection_states
from tandem.router.discovery import Discovery
from tandem.router.keyfile import keep_class_keys, load_class_keys
from tandem.router.proxy import (
    ROUTER,
    handle_chat,
    handle_completions,
    handle_health,
    handle_metrics,
    handle_models,
    handle_responses,
    request_ids,
)
from tandem.router.scrape import scrape_forever
from tandem.router.state import Router
from tandem.router.surface import add_surface_routes
from tandem.router.tracing import Tracing, trace_middleware

log = logging.getLogger("tandem.router")
#: aiohttp's per-connection server log, as the router's own.
HTTP_LOG = logging.getLogger("tandem.router.http")


class ClientProtocolErrors(logging.Filter):
    """A malformed request (bad request line, broken chunked framing, oversized header)
    is the client's error, not the router's: aiohttp answers it 400 and logs it as an
    error with a traceback; here it becomes one INFO line, so hostile clients cannot fill
    the log with tracebacks. Errors of the router's own code keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {exc.message or type(exc).__name__}"
            record.args = None
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


HTTP_LOG.addFilter(ClientProtocolErrors())

DISCOVERY: web.AppKey[Discovery] = web.AppKey("discovery", Discovery)


def build_app(
    config: RouterConfig,
    discovery: Discovery,
    *,
    seed: int | None = None,
    class_keys: Path | None = None,
    tracing: Tracing | None = None,
) -> web.Application:
    """A router app; nothing runs until it is started. ``class_keys``: the directory of
    the API keys that grant priority classes (read at start, then kept current).
    ``tracing``: export spans of every request (:mod:`tandem.router.tracing`); it is shut
    down (flushed) with the app."""
    app = web.Application(middlewares=[connection_states, request_ids])
    router = app[ROUTER] = Router(config, seed=seed)
    app[CONNECTIONS] = ConnectionGuard(router)
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
    if class_keys is not None:
        app.cleanup_ctx.append(functools.partial(_class_keys, directory=class_keys))
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


async def _class_keys(app: web.Application, *, directory: Path) -> AsyncIterator[None]:
    router = app[ROUTER]
    load_class_keys(router, directory)  # unreadable at start: the router does not start
    task = asyncio.create_task(keep_class_keys(router, directory), name="router-class-keys")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _scraper(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(scrape_forever(app[ROUTER]), name="router-scraper")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass
class Serving:
    """A started router: its runner, its listener and the port it listens on."""

    runner: web.AppRunner
    listener: asyncio.Server
    port: int

    async def stop(self) -> None:
        """Stop listening, then let in-flight requests finish (the runner's drain)."""
        self.listener.close()
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
        logger=HTTP_LOG,
    )
    await runner.setup()
    server = runner.server
    assert server is not None
    listener = await asyncio.get_running_loop().create_server(
        app[CONNECTIONS].factory(server), host, port, backlog=1024
    )
    return Serving(runner=runner, listener=listener, port=int(listener.sockets[0].getsockname()[1]))


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
