"""Client connections: a deadline on every request head, an idle keep-alive bound, and a
bound on the connections of each client address. Does I/O (asyncio transports).

aiohttp gives a connection as long as it likes to send a request head and, by default,
keeps an idle keep-alive connection for an hour, so clients that trickle headers or open
connections and send nothing hold sockets without bound. :class:`ConnectionGuard` sits
between the listening socket and aiohttp's protocol (it wraps the protocol factory, so
aiohttp itself is untouched) and gives each connection one deadline at a time:

- from connect, and from the first byte of each later request, the request head must be
  complete within ``header_timeout_s``;
- while a request is being handled there is no connection deadline (the body has its own,
  see :mod:`tandem.router.proxy`, and the legs theirs);
- after an answer, a connection that sends nothing is closed after ``client_idle_s``
  (plus aiohttp's lingering time when the answer came before the whole body).

Each client address may hold ``max_connections_per_client`` connections; when a new one
would pass that, the address's oldest connection with no request in progress is closed
to make room, and if every one is busy the new connection is closed at once.
:func:`connection_states` is the middleware that tells the guard when a request starts
and ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, cast

from aiohttp import web

from tandem.router.config import RouterConfig
from tandem.router.state import Router

log = logging.getLogger("tandem.router.connections")

#: Why the router closed a client connection (``tandem_router_connections_closed_total``).
CLOSE_HEADER_TIMEOUT = "header_timeout"
CLOSE_IDLE = "idle"
CLOSE_CLIENT_LIMIT = "client_limit"
"""An idle connection closed to make room for a new one of the same address."""
CLOSE_REFUSED = "refused"
"""A new connection closed at once: every connection of its address was busy."""

#: aiohttp's ``lingering_time``: after an answer sent before the whole body was read,
#: aiohttp reads and drops the rest for up to this long, so that closing does not reset
#: the connection under the answer.
LINGER_S = 10.0

State = Literal["head", "busy", "linger", "idle"]
"""``head``: waiting for a request head (since connect, or since the first byte after an
idle spell); ``busy``: a request is being handled; ``linger``: answered, the rest of its
body still arriving (aiohttp drops it); ``idle``: answered, nothing sent since."""


class GuardedConnection(asyncio.Protocol):
    """One client connection: aiohttp's protocol inside, the guard's deadline around it."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self.state: State = "head"
        self.opened_s = 0.0
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline_s = float("inf")
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; not always an asyncio.Transport subclass (uvloop's is not)
        self.transport = cast(asyncio.Transport, transport)
        self.address = client_address(transport.get_extra_info("peername"))
        self.opened_s = asyncio.get_running_loop().time()
        if not self.guard.admit(self):
            self._refused = True
            self.transport.abort()
            return
        self.inner.connection_made(transport)
        self.set_deadline(self.guard.config.timeouts.request_header_s)

    def data_received(self, data: bytes) -> None:
        if self.state == "idle":
            self.state = "head"
            self.set_deadline(self.guard.config.timeouts.request_header_s, keep_earlier=True)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.guard.forget(self)
        if not self._refused:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def request_started(self) -> None:
        self.state = "busy"
        self._cancel_timer()

    def request_finished(self, body_read: bool) -> None:
        """The handler answered; ``body_read``: the request's whole body had arrived."""
        if self.state != "busy":
            return
        idle_s = self.guard.config.timeouts.client_idle_s
        if body_read:
            self.state = "idle"
            self.set_deadline(idle_s)
        else:
            self.state = "linger"
            self.set_deadline(LINGER_S + idle_s)

    def set_deadline(self, in_s: float, *, keep_earlier: bool = False) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + in_s
        if keep_earlier and self._timer is not None and self._deadline_s <= deadline:
            return
        self._cancel_timer()
        self._deadline_s = deadline
        self._timer = loop.call_at(deadline, self._expire)

    def close(self, reason: str) -> None:
        """Close the connection (nothing is in progress on it); ``reason`` is counted."""
        if self.closing or self.transport is None:
            return
        self.closing = True
        self.guard.count_close(reason)
        log.debug("closing a connection of %s: %s", self.address, reason)
        self.transport.close()

    def _expire(self) -> None:
        self._timer = None
        if self.state == "head":
            self.close(CLOSE_HEADER_TIMEOUT)
        elif self.state != "busy":
            self.close(CLOSE_IDLE)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class ConnectionGuard:
    """The client connections of one router's listener, by address."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.by_address: dict[str, list[GuardedConnection]] = {}
        self.by_transport: dict[asyncio.BaseTransport, GuardedConnection] = {}

    @property
    def config(self) -> RouterConfig:
        return self.router.config

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` around aiohttp's own."""
        return lambda: GuardedConnection(self, inner())

    def admit(self, conn: GuardedConnection) -> bool:
        """Count ``conn`` against its address, making room by closing the address's oldest
        connection that has no request in progress; False when every one is busy."""
        limit = self.config.max_connections_per_client
        live = [c for c in self.by_address.get(conn.address, ()) if not c.closing]
        if len(live) >= limit:
            spare = [c for c in live if c.state != "busy"]
            if not spare:
                self.count_close(CLOSE_REFUSED)
                log.warning("refused a connection of %s: its %d connections are all busy",
                            conn.address, len(live))  # fmt: skip
                return False
            min(spare, key=lambda c: c.opened_s).close(CLOSE_CLIENT_LIMIT)
        self.by_address.setdefault(conn.address, []).append(conn)
        assert conn.transport is not None
        self.by_transport[conn.transport] = conn
        self.router.metrics.client_connections.inc()
        return True

    def forget(self, conn: GuardedConnection) -> None:
        conns = self.by_address.get(conn.address)
        if conns is not None and conn in conns:
            conns.remove(conn)
            self.router.metrics.client_connections.dec()
            if not conns:
                del self.by_address[conn.address]
        if conn.transport is not None:
            self.by_transport.pop(conn.transport, None)

    def lookup(self, transport: asyncio.BaseTransport | None) -> GuardedConnection | None:
        return None if transport is None else self.by_transport.get(transport)

    def count_close(self, reason: str) -> None:
        self.router.metrics.connections_closed.labels(reason).inc()


def client_address(peer: Any) -> str:
    """The address part of a transport's ``peername`` (IPv4, IPv6 or a Unix path)."""
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return str(peer or "")


CONNECTIONS: web.AppKey[ConnectionGuard] = web.AppKey("connections", ConnectionGuard)


@web.middleware
async def connection_states(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tell the guard that the connection's request head arrived, and when it is answered."""
    conn = request.app[CONNECTIONS].lookup(request.transport)
    if conn is not None:
        conn.request_started()
    try:
        return await handler(request)
    finally:
        if conn is not None:
            conn.request_finished(body_read=request.content.is_eof())
