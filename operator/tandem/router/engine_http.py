"""A lean HTTP/1.1 client for the engine legs: one parser callback a chunk. Does I/O.

Both legs (prefill and the generating one) go through it. The generating leg relays
every token the client gets, so its cost per chunk is the router's cost per token. On
``aiohttp.ClientSession`` each chunk wakes a coroutine (``content.readany()``) that
then writes it out (``StreamResponse.write``): two event loop round trips and a task
step per token. Here the engine connection is an
:class:`asyncio.Protocol` parsed by ``httptools`` (the parser uvicorn, and so vLLM,
serves with), and once a stream is handed to a sink (:meth:`EngineAnswer.stream`)
each decoded chunk goes to it straight from the parser's callback: the relay writes it
to the client's transport there, and no coroutine runs until the stream ends, breaks or
must wait for a slow client (:meth:`EngineAnswer.pause`).

Scope: POST over plain HTTP to the engines, keep-alive connections reused only after a
whole answer, no redirects, proxies, TLS or decompression (the router asks for none).
Idle connections are kept :data:`KEEPALIVE_S`, below the 5 s uvicorn (vLLM) keeps an
idle connection, so that a reused connection is not one the engine is closing.
Failures are :class:`EngineConnectError` (never sent: safe to retry) or
:class:`EngineBrokeOff` (the request may have reached the engine).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import httptools

log = logging.getLogger("tandem.router")

#: How long an idle engine connection is kept for reuse (seconds).
KEEPALIVE_S = 4.0
#: Parsed engine URLs kept (an engine URL and path each); past it the cache restarts.
URL_CACHE = 4096


class EngineConnectError(ConnectionError):
    """The engine could not be reached: the request was never sent."""


class EngineBrokeOff(ConnectionError):
    """The connection failed or the answer was malformed after the request went out."""


class EngineAnswer(asyncio.Protocol):
    """One connection to an engine, carrying one exchange at a time.

    Between :meth:`EngineClient.post` and :meth:`release`/:meth:`close` it is the answer
    to that POST: :attr:`status` and :attr:`headers` (names lower-cased) once
    :meth:`head` returned, then the body through :meth:`read`, :meth:`first_chunk` or a
    sink (:meth:`stream`).
    """

    def __init__(self, client: EngineClient, key: tuple[str, int]) -> None:
        self._client, self.key = client, key
        self.transport: asyncio.Transport | None = None
        self.idle_since_s = 0.0
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.has_head = False
        self.complete = False
        """The whole answer arrived (and nothing went wrong)."""
        self.error: BaseException | None = None
        self.paused = False
        self._keep_alive = False
        self._framed = False
        self._chunks: list[bytes] = []
        self._sink: Callable[[bytes], None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- the caller's side --------------------------------------------------------------

    async def head(self) -> None:
        """Wait for the status line and headers."""
        while not self.has_head:
            await self._wait()

    async def read(self) -> bytes:
        """The whole body."""
        while not self.complete:
            await self._wait()
        body = b"".join(self._chunks)
        self._chunks.clear()
        return body

    async def first_chunk(self) -> bytes:
        """The first piece of body that arrived; ``b""`` if the answer ended without one."""
        while not self._chunks and not self.complete:
            await self._wait()
        return self._chunks.pop(0) if self._chunks else b""

    def stream(self, sink: Callable[[bytes], None]) -> None:
        """Hand every further chunk to ``sink``, called from the parser (chunks already
        received first). The sink may call :meth:`pause`; :meth:`wait` then returns."""
        self._sink = sink
        pending, self._chunks = self._chunks, []
        for chunk in pending:
            sink(chunk)

    async def wait(self) -> None:
        """Until the streamed answer ends, breaks, or the sink paused it (see the flags)."""
        while not (self.complete or self.paused):
            await self._wait()

    def pause(self) -> None:
        """Stop reading from the engine (the client is slow); :meth:`wait` returns."""
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
            self._wake()

    def stop(self) -> None:
        """Relay nothing more (the stream is being ended without the engine's end)."""
        self._sink = _drop
        self.pause()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def release(self) -> None:
        """Done with the answer: reuse the connection if it is whole, else close it."""
        self._client.release(self)

    def close(self) -> None:
        """Abort the connection (an engine aborts a request whose connection closes)."""
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    async def _wait(self) -> None:
        if self.error is not None:
            raise self.error
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- asyncio.Protocol and the parser's callbacks ----------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:  # a bug in a sink, not the engine
            log.exception("relaying an engine's answer failed", exc_info=err.__context__)
            self._fail(EngineBrokeOff(f"relaying the answer failed: {err.__context__!r}"))
            self.close()
        except httptools.HttpParserError as err:
            self._fail(EngineBrokeOff(f"malformed answer: {err}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # closes the transport; connection_lost tells the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._client.forget(self)
        if self.has_head and not self._framed and not self.complete and self.error is None:
            self.complete = True  # an answer delimited by the end of the connection
            self._wake()
            return
        if not self.complete:
            self._fail(EngineBrokeOff(f"the connection closed ({type(exc).__name__})"
                                      if exc else "the connection closed"))  # fmt: skip

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        if key in ("content-length", "transfer-encoding"):
            self._framed = True
        self.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.has_head = True
        if self.status in (204, 304) or 100 <= self.status < 200:
            self._framed = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._sink is not None:
            self._sink(body)
        else:
            self._chunks.append(body)
            self._wake()

    def on_message_complete(self) -> None:
        self._framed = True
        self._keep_alive = self.parser.should_keep_alive()
        self.complete = True
        self._wake()

    def _fail(self, err: BaseException) -> None:
        if self.error is None and not self.complete:
            self.error = err
            self._wake()


def _drop(chunk: bytes) -> None:
    pass


class EngineClient:
    """A pool of keep-alive connections to the engines, for :class:`EngineAnswer`."""

    def __init__(self, *, keepalive_s: float = KEEPALIVE_S) -> None:
        self.keepalive_s = keepalive_s
        self._idle: dict[tuple[str, int], list[EngineAnswer]] = {}
        self._urls: dict[str, tuple[tuple[str, int], bytes, bytes]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self.connects = 0
        """Connections opened so far (keep-alive reuse shows as few)."""

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_timeout_s: float | None,
    ) -> EngineAnswer:
        """Send a POST; the answer's :meth:`EngineAnswer.head` is not awaited yet."""
        key, target, host = self._target(url)
        answer = self._checkout(key) or await self._connect(key, connect_timeout_s)
        lines = [b"POST %s HTTP/1.1\r\nHost: %s\r\n" % (target, host)]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                answer.close()
                raise ValueError(f"header {name!r} has a line break")
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        lines.append(body)
        assert answer.transport is not None
        answer.transport.write(b"".join(lines))
        return answer

    def release(self, answer: EngineAnswer) -> None:
        transport = answer.transport
        whole = answer.complete and answer._keep_alive
        if not whole or transport is None or transport.is_closing():
            answer.close()
            return
        if answer.paused:
            answer.resume()
        loop = asyncio.get_running_loop()
        answer._reset()
        answer.idle_since_s = loop.time()
        self._idle.setdefault(answer.key, []).append(answer)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive_s, self._expire)

    def forget(self, answer: EngineAnswer) -> None:
        """A connection closed: no longer offered for reuse."""
        idle = self._idle.get(answer.key)
        if idle and answer in idle:
            idle.remove(answer)

    def idle_connections(self) -> int:
        return sum(len(conns) for conns in self._idle.values())

    async def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conns in list(self._idle.values()):
            for answer in list(conns):
                answer.close()
        self._idle.clear()

    def _target(self, url: str) -> tuple[tuple[str, int], bytes, bytes]:
        """The connection key, request target and ``Host`` header of an engine URL."""
        cached = self._urls.get(url)
        if cached is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(f"engine URL {url!r}: only http://host:port/path is served")
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            port = parts.port or 80
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            cached = (parts.hostname, port), target.encode(), f"{host}:{port}".encode()
            if len(self._urls) >= URL_CACHE:
                self._urls.clear()
            self._urls[url] = cached
        return cached

    def _checkout(self, key: tuple[str, int]) -> EngineAnswer | None:
        idle = self._idle.get(key)
        limit = asyncio.get_running_loop().time() - self.keepalive_s
        while idle:
            answer = idle.pop()
            alive = answer.transport is not None and not answer.transport.is_closing()
            if alive and answer.idle_since_s > limit:
                return answer
            answer.close()
        return None

    async def _connect(self, key: tuple[str, int], timeout_s: float | None) -> EngineAnswer:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, answer = await loop.create_connection(
                    lambda: EngineAnswer(self, key), key[0], key[1]
                )
        except TimeoutError:
            raise EngineConnectError(f"no connection within {timeout_s:g} s") from None
        except OSError as err:
            raise EngineConnectError(f"{type(err).__name__}: {err}") from None
        self.connects += 1
        return answer

    def _expire(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        limit = loop.time() - self.keepalive_s
        for key, conns in list(self._idle.items()):
            for answer in [a for a in conns if a.idle_since_s <= limit]:
                conns.remove(answer)
                answer.close()
            if not conns:
                del self._idle[key]
        if self._idle:
            self._sweep = loop.call_later(self.keepalive_s / 2, self._expire)
