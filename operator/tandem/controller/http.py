"""The operator's own HTTP endpoints: ``/metrics`` and ``/healthz``. Does network I/O.

Served on ``--metrics-port`` by every replica, leader or standby. Kopf's liveness
endpoint (``--liveness``) runs only while a replica leads; until then
:func:`serve_standby_liveness` answers on the same address so a standby's liveness
probe passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from aiohttp import web

from tandem.controller.metrics import ControllerMetrics

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HttpServer:
    """An aiohttp site; ``port`` is the bound port once started (0 picks a free one)."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self.host = host
        self.port = port

    async def start(self) -> int:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()


def metrics_app(
    metrics: ControllerMetrics, health: Callable[[], dict[str, Any]]
) -> web.Application:
    async def get_metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(), headers={"Content-Type": METRICS_CONTENT_TYPE}
        )

    async def get_health(_: web.Request) -> web.Response:
        return web.json_response(health())

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_health)
    return app


def serve_standby_liveness(endpoint: str) -> HttpServer:
    """A server answering ``endpoint`` (``http://host:port/path``) with ``standby``."""
    url = urlparse(endpoint)

    async def answer(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"role": "standby"}), content_type="application/json")

    app = web.Application()
    app.router.add_get(url.path or "/", answer)
    return HttpServer(app, url.hostname or "0.0.0.0", url.port or 80)
