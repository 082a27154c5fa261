"""A fault-injecting proxy between a client and the real API server. Does network I/O.

It listens on plain HTTP on 127.0.0.1 and forwards every request, credentials included
(a bearer token: the client's identity is the one the API server authenticates and
audits), to the apiserver over TLS. Faults, drawn from a seeded generator
(``FaultPlan``, pure):

- a share of the requests that are not watches is answered with an error instead of
  the API server's answer: ``500``/``503`` without forwarding, ``409 Conflict`` (writes
  only) without forwarding, or ``504`` *after* forwarding (writes only): the write was
  applied but its answer was lost, as when a load balancer times out;
- every watch is cut ``watch_cut_s`` after it opened, the connection dropped mid-stream
  (not the clean end a server timeout gives).

``FaultProxy`` runs it on an event loop of its own thread, for synchronous tests and
benches: ``with FaultProxy(url, ca) as proxy: ... proxy.url ... proxy.stats``.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORWARDED_HEADERS = ("Authorization", "Accept", "Content-Type", "User-Agent")
REASONS = {
    409: (
        "Conflict",
        "the object has been modified; please apply your changes to the latest "
        "version and try again (injected by the fault proxy)",
    ),
    500: ("InternalError", "Internal error occurred: injected by the fault proxy"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request (injected)"),
    504: ("Timeout", "the reply was lost after the request was applied (injected)"),
}


@dataclass(frozen=True)
class Fault:
    status: int
    applied: bool
    """The request reaches the API server first (its answer is what is lost)."""


@dataclass
class FaultPlan:
    """Which requests fail, and how. Pure: a seeded generator decides.

    >>> plan = FaultPlan(share=1.0, seed=1)
    >>> {plan.pick("GET").status for _ in range(50)} <= {500, 503}
    True
    >>> sorted({(f.status, f.applied) for f in (plan.pick("PATCH") for _ in range(200))})
    [(409, False), (500, False), (503, False), (504, True)]
    >>> FaultPlan(share=0.0).pick("PATCH") is None
    True
    """

    share: float = 0.1
    """Probability that one request (watches excepted) gets a fault."""
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share must be within [0, 1], got {self.share}")
        self.rng = random.Random(self.seed)

    def pick(self, method: str) -> Fault | None:
        if self.rng.random() >= self.share:
            return None
        if method.upper() not in WRITES:
            return Fault(self.rng.choice((500, 503)), applied=False)
        return self.rng.choice(
            (Fault(500, False), Fault(503, False), Fault(409, False), Fault(504, True))
        )


def status_body(code: int) -> bytes:
    reason, message = REASONS.get(code, ("InternalError", "injected by the fault proxy"))
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


def is_watch(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("true", "1")


class _Proxy:
    """The aiohttp application (runs on the proxy thread's loop)."""

    def __init__(self, upstream: str, ca: Path, plan: FaultPlan, watch_cut_s: float) -> None:
        self.upstream = upstream.rstrip("/")
        self.ssl = ssl.create_default_context(cafile=str(ca))
        self.plan = plan
        self.watch_cut_s = watch_cut_s
        self.stats: Counter[str] = Counter()
        self.session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl, limit=0), auto_decompress=True
        )

    async def stop(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def _error(self, fault: Fault) -> web.Response:
        self.stats[f"fault {fault.status}{' after applying' if fault.applied else ''}"] += 1
        return web.Response(
            status=fault.status, body=status_body(fault.status), content_type="application/json"
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        watch = is_watch(request)
        self.stats["watches" if watch else "requests"] += 1
        fault = None if watch else self.plan.pick(request.method)
        if fault is not None and not fault.applied:
            return self._error(fault)
        body = await request.read()
        headers = {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}
        timeout = aiohttp.ClientTimeout(total=None if watch else 120, sock_connect=10)
        try:
            async with self.session.request(
                request.method,
                self.upstream + request.path_qs,
                data=body or None,
                headers=headers,
                timeout=timeout,
            ) as up:
                content_type = up.headers.get("Content-Type", "application/json")
                if watch and up.status == 200:
                    return await self._stream(request, up, content_type)
                data = await up.read()
                status = up.status
        except (aiohttp.ClientError, TimeoutError) as err:
            self.stats["upstream unreachable"] += 1
            return web.Response(
                status=503,
                body=json.dumps({"kind": "Status", "code": 503, "message": str(err)}).encode(),
                content_type="application/json",
            )
        if fault is not None:
            return self._error(fault)
        return web.Response(status=status, body=data, headers={"Content-Type": content_type})

    async def _stream(
        self, request: web.Request, up: aiohttp.ClientResponse, content_type: str
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.watch_cut_s
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                chunk = await asyncio.wait_for(up.content.readany(), remaining)
            except TimeoutError:
                break
            except aiohttp.ClientError:
                chunk = b""
            if not chunk:  # the API server ended it (its timeout, or it went away)
                await resp.write_eof()
                return resp
            await resp.write(chunk)
        # Cut mid-stream: no end of the chunked body, the connection simply drops.
        self.stats["watches cut"] += 1
        if request.transport is not None:
            request.transport.abort()
        return resp


class FaultProxy:
    """The proxy on a thread of its own; a context manager."""

    def __init__(
        self,
        upstream: str,
        ca: Path,
        *,
        share: float = 0.1,
        watch_cut_s: float = 10.0,
        seed: int = 0,
    ) -> None:
        self._proxy = _Proxy(upstream, ca, FaultPlan(share, seed), watch_cut_s)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy")
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def stats(self) -> Counter[str]:
        return self._proxy.stats

    async def _start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.on_startup.append(self._proxy.start)
        app.on_cleanup.append(self._proxy.stop)
        app.router.add_route("*", "/{tail:.*}", self._proxy.handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
