"""Slow and greedy clients over real loopback sockets: trickled heads and bodies, idle
keep-alive connections, many connections from one address, a client that stops reading.
Attackers connect from 127.0.0.3, the well-behaved client from 127.0.0.2 (both loopback),
so the per-address bound tells them apart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from tandem.router.config import RouterConfig, Timeouts
from tests.router.conftest import (
    MODEL,
    Factory,
    RouterHandle,
    SimEngine,
    metric_value,
    poll_until,
)

pytestmark = pytest.mark.asyncio

BOUND_S = 30.0
Sims = Callable[..., Awaitable[SimEngine]]
ATTACKER = "127.0.0.3"
CLIENT = "127.0.0.2"
SHORT = {"model": MODEL, "prompt": "hello", "max_tokens": 2}


def config(**timeouts: float) -> RouterConfig:
    base = Timeouts(request_header_s=0.5, request_body_s=1.0, client_idle_s=0.5)
    return RouterConfig(timeouts=replace(base, **timeouts), scrape_interval_s=0.2)


async def raw_connection(
    handle: RouterHandle, source: str = ATTACKER
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", handle.serving.port, local_addr=(source, 0))


async def closed_by_router(reader: asyncio.StreamReader) -> bytes:
    """Everything the router sent until it closed the connection (bounded wait)."""
    got = b""
    async with asyncio.timeout(BOUND_S):
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                got += chunk
    return got


async def status_line(reader: asyncio.StreamReader) -> bytes:
    """The status line of the router's answer, read as soon as it comes (bounded wait)."""
    async with asyncio.timeout(BOUND_S):
        return (await reader.readline()).rstrip()


@contextlib.asynccontextmanager
async def trickle(writer: asyncio.StreamWriter, every_s: float = 0.1) -> AsyncIterator[None]:
    """Send one byte every ``every_s`` until the block ends or the router hangs up."""

    async def drip() -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while not writer.is_closing():
                writer.write(b"a")
                await writer.drain()
                await asyncio.sleep(every_s)

    task = asyncio.create_task(drip())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def good_request(handle: RouterHandle) -> int:
    connector = aiohttp.TCPConnector(local_addr=(CLIENT, 0))
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession(connector=connector) as session,
        session.post(handle.url + "/v1/completions", json=SHORT) as resp,
    ):
        await resp.read()
        return resp.status


async def test_trickled_bodies_hold_no_admission_slot(pd_router: Factory) -> None:
    """Two slots, six clients trickling their bodies: others are still served (they got
    429 until every trickler timed out), and each trickler gets 408."""
    handle = await pd_router(
        replace(config(request_body_s=2.0), max_inflight=2), prefill=["prefill"], decode=["decode"]
    )
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    slow = [await raw_connection(handle) for _ in range(6)]
    for _, writer in slow:
        writer.write(head)
    async with contextlib.AsyncExitStack() as stack:
        for _, writer in slow:
            await stack.enter_async_context(trickle(writer))
        answers = asyncio.gather(*(status_line(reader) for reader, _ in slow))
        statuses = [await good_request(handle) for _ in range(4)]
        assert statuses == [200] * 4
        assert handle.router.admission.total == 0
        assert await answers == [b"HTTP/1.1 408 Request Timeout"] * 6
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_rejections_total", reason="body_timeout") == 6
    assert metric_value(text, "tandem_router_requests_total", code="408") == 6
    assert metric_value(text, "tandem_router_requests_total", code="429") == 0


async def test_trickled_and_missing_heads_are_closed(pd_router: Factory) -> None:
    handle = await pd_router(config(), prefill=["prefill"], decode=["decode"])
    silent = [await raw_connection(handle) for _ in range(10)]
    slow = [await raw_connection(handle) for _ in range(10)]
    for _, writer in slow:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nX-Slow: ")
    async with contextlib.AsyncExitStack() as stack:
        for _, writer in slow:
            await stack.enter_async_context(trickle(writer))
        for reader, _ in silent + slow:
            assert await closed_by_router(reader) == b"", "closed without an answer"
    assert await good_request(handle) == 200
    text = await handle.metrics()
    closed = metric_value(text, "tandem_router_connections_closed_total", reason="header_timeout")
    assert closed == 20


async def test_an_idle_keep_alive_connection_is_closed(pd_router: Factory) -> None:
    handle = await pd_router(config(), prefill=["prefill"], decode=["decode"])
    reader, writer = await raw_connection(handle, CLIENT)
    writer.write(b"GET /health HTTP/1.1\r\nHost: router\r\n\r\n")
    await writer.drain()
    answer = await closed_by_router(reader)
    assert answer.startswith(b"HTTP/1.1 200") and b'"status": "ok"' in answer, answer
    assert metric_value(await handle.metrics(), "tandem_router_connections_closed_total",
                        reason="idle") >= 1  # fmt: skip


async def test_one_address_holds_at_most_its_connections(pd_router: Factory) -> None:
    """Three per address: a fourth idle connection closes the oldest idle one; with three
    busy ones (trickling bodies) a fourth is refused; another address is not affected."""
    limited = replace(config(request_body_s=30.0, request_header_s=30.0, client_idle_s=30.0),
                      max_connections_per_client=3)  # fmt: skip
    handle = await pd_router(limited, prefill=["prefill"], decode=["decode"])
    idle = [await raw_connection(handle) for _ in range(3)]
    await poll_until(_open(handle, 3), timeout_s=BOUND_S)
    newest = await raw_connection(handle)
    assert await closed_by_router(idle[0][0]) == b"", "the oldest idle one made room"
    newest[1].write(b"GET /health HTTP/1.1\r\nHost: router\r\nConnection: close\r\n\r\n")
    assert (await closed_by_router(newest[0])).startswith(b"HTTP/1.1 200")
    for _, writer in idle[1:]:
        writer.close()
    await poll_until(_open(handle, 0), timeout_s=BOUND_S)
    busy = [await raw_connection(handle) for _ in range(3)]
    for _, writer in busy:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 99\r\n\r\n{")
    async with contextlib.AsyncExitStack() as stack:
        for _, writer in busy:
            await stack.enter_async_context(trickle(writer, every_s=0.2))
        await poll_until(_busy(handle, 3), timeout_s=BOUND_S)
        refused, _ = await raw_connection(handle)
        assert await closed_by_router(refused) == b""
        assert await good_request(handle) == 200
        for _, writer in busy:
            writer.close()
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_connections_closed_total", reason="client_limit") == 1
    assert metric_value(text, "tandem_router_connections_closed_total", reason="refused") == 1


def _open(handle: RouterHandle, n: int) -> Any:
    guard = _guard(handle)

    async def check() -> bool:
        return len([c for c in guard.by_address.get(ATTACKER, ()) if not c.closing]) == n

    return check


def _busy(handle: RouterHandle, n: int) -> Any:
    guard = _guard(handle)

    async def check() -> bool:
        return sum(c.state == "busy" for c in guard.by_address.get(ATTACKER, ())) == n

    return check


def _guard(handle: RouterHandle) -> Any:
    from tandem.router.connections import CONNECTIONS

    app = handle.serving.runner.app
    return app[CONNECTIONS]


async def test_a_client_that_stops_reading_is_cut(pd_router: Factory, sims: Sims) -> None:
    """A stream nobody reads would hold its engine and its admission slot for as long as
    the client likes; once the router cannot write for the idle-stream timeout, it is cut."""
    timeouts = Timeouts(idle_stream_s=1.0, request_header_s=5.0, client_idle_s=5.0)
    # 16 choices of 4,000 tokens: about 11 MB of events, more than the kernel's buffers
    # (at most 4 MiB to send, 4 kB to receive) hold; 50x speed makes them in seconds
    decode = await sims("decode", speedup=50.0)
    handle = await pd_router(RouterConfig(timeouts=timeouts, scrape_interval_s=0.2),
                             prefill=["prefill"], decode=[decode])  # fmt: skip
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.bind((ATTACKER, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", handle.serving.port))
    _, writer = await asyncio.open_connection(sock=sock)
    writer.transport.pause_reading()  # read nothing: the router's writes back up
    body = b'{"model": "%s", "prompt": "go on", "max_tokens": 4000, "n": 16, "stream": true}' % (
        MODEL.encode()
    )
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))  # fmt: skip

    async def released() -> bool:
        return handle.router.admission.total == 0 and await decode.running() == 0

    await poll_until(_admitted(handle), timeout_s=BOUND_S)
    await poll_until(released, timeout_s=BOUND_S)
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_total", code="499") == 1
    assert metric_value(text, "tandem_router_requests_total", code="200") == 0, "not read whole"
    writer.close()


def _admitted(handle: RouterHandle) -> Any:
    async def check() -> bool:
        return bool(handle.router.admission.total == 1)

    return check


async def test_a_slow_reader_gets_the_whole_stream(pd_router: Factory, sims: Sims) -> None:
    """A client that reads, only slower than the engine writes, makes the router stop
    reading the engine while the client's buffer is full, then go on: every event arrives,
    in order, and the answer is whole."""
    timeouts = Timeouts(idle_stream_s=5.0, request_header_s=5.0, client_idle_s=5.0)
    decode = await sims("decode", speedup=50.0)
    handle = await pd_router(RouterConfig(timeouts=timeouts, scrape_interval_s=0.2),
                             prefill=["prefill"], decode=[decode])  # fmt: skip
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((CLIENT, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", handle.serving.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**16)
    # about 11 MB of events (as above): more than the kernel's buffers, so the router's
    # own write buffer fills and the engine connection is paused, many times over
    body = b'{"model": "%s", "prompt": "go on", "max_tokens": 4000, "n": 16, "stream": true}' % (
        MODEL.encode()
    )
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    got = bytearray()
    async with asyncio.timeout(120):
        while chunk := await reader.read(16384):
            got += chunk
            await asyncio.sleep(0.002)  # about 8 MB/s at most: slower than the engine
    writer.close()
    head, _, chunked = bytes(got).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    payload = _dechunk(chunked)
    events = [e for e in payload.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    finished = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    per_choice = [0] * 16
    for event in finished:
        for choice in event["choices"]:
            per_choice[choice["index"]] += 1
    assert per_choice == [4000] * 16, "every token of every choice, none lost or doubled"
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_total", code="200") == 1


def _dechunk(data: bytes) -> bytes:
    """The body of a chunked transfer (the framing checked as it is removed)."""
    out, at = bytearray(), 0
    while True:
        eol = data.index(b"\r\n", at)
        size = int(data[at:eol], 16)
        if size == 0:
            return bytes(out)
        out += data[eol + 2 : eol + 2 + size]
        assert data[eol + 2 + size : eol + 4 + size] == b"\r\n", "chunk framing"
        at = eol + 4 + size
