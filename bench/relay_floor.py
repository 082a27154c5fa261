"""The floor under ``bench/router.py``'s CPU per relayed token: what a bare relay costs.

``bench/router.py`` charges the router every CPU-second it spends. This bench says how much
of that any relay on the same stack would pay, and how much a relay written one level
lower would save, so that the router's figure reads against a floor rather than alone.
Two bare relays, each with one leg (a POST relayed to one upstream, its SSE answer relayed
back chunk by chunk) and nothing else (no admission, metrics, timeouts, retries, errors or
back-pressure: they are floors, not proxies):

- **aiohttp**: the router's stack before its legs moved to the protocol level. An
  ``aiohttp`` server; the upstream leg through an ``aiohttp.ClientSession`` (keep-alive,
  no limit); each chunk read with ``content.readany()`` and written with
  ``StreamResponse.write``.
- **protocol**: what the router's legs do now (``tandem.router.engine_http``). The same
  server; the upstream leg on an :class:`asyncio.Protocol` whose parser is ``httptools``
  (uvicorn's), with a keep-alive pool of its own; each decoded chunk is framed and written
  to the client's transport from the parser's callback, with no coroutine woken per chunk.

The upstream answers every POST with ``--tokens`` SSE events, one chunk each, ``--gap-ms``
apart; a load process keeps ``--streams`` clients streaming until ``--requests`` are done.
The relay runs on one core and the upstream and the load on the others where the machine
allows (as ``bench/router.py`` pins its proxies), everything on uvloop. The relay's CPU
time (user and system, ``/proc/PID/stat``) over the measured requests is charged to the
relayed tokens. Needs the ``bench`` extra (``pip install -e '.[bench]'``: uvloop,
httptools).

Usage: ``python bench/relay_floor.py [--streams 50,200] [--requests 2000] [--tokens 64]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from router import cpu_times, free_port, plan_cores

try:
    import httptools
    import uvloop
except ImportError:  # pragma: no cover - a missing extra is reported, not hidden
    print("bench/relay_floor.py needs the bench extra: pip install -e '.[bench]'", file=sys.stderr)
    raise SystemExit(2) from None

PATH = "/v1/completions"
EVENT = (
    b'data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":'
    b'[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
)
DONE = b"data: [DONE]\n\n"
MODES = ("aiohttp", "protocol")


# --- the upstream -----------------------------------------------------------------------


def serve_upstream(port: int, tokens: int, gap_s: float, cores: set[int] | None) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        for _ in range(tokens):
            await asyncio.sleep(gap_s)
            await answer.write(EVENT)
        await answer.write(DONE)
        await answer.write_eof()
        return answer

    if cores:
        os.sched_setaffinity(0, cores)
    app = web.Application()
    app.router.add_post(PATH, handle)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- the two relays ---------------------------------------------------------------------


class Leg(asyncio.Protocol):
    """One upstream connection, parsed by httptools; chunks go to ``sink`` once set."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reset()

    def reset(self) -> None:
        loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[int] = loop.create_future()
        self.done: asyncio.Future[bool] = loop.create_future()
        self.early: list[bytes] = []
        self.sink: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        self.head.set_result(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink(body)
        else:
            self.early.append(body)

    def on_message_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(self.parser.should_keep_alive())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectionError("upstream closed"))
        if not self.done.done():
            self.done.set_result(False)


def serve_relay(port: int, upstream: int, mode: str, cores: set[int] | None) -> None:
    idle: list[Leg] = []
    url = f"http://127.0.0.1:{upstream}{PATH}"

    async def via_aiohttp(request: web.Request, body: bytes) -> web.StreamResponse:
        session: aiohttp.ClientSession = request.app["session"]
        async with session.post(url, data=body) as resp:
            answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await answer.prepare(request)
            while chunk := await resp.content.readany():
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    async def via_protocol(request: web.Request, body: bytes) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        if idle:
            leg = idle.pop()
            leg.reset()
        else:
            _, leg = await loop.create_connection(Leg, "127.0.0.1", upstream)
        assert leg.transport is not None
        head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        leg.transport.write(head % (PATH.encode(), upstream)
                            + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        await leg.head
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        await answer.write(b"".join(leg.early))  # sends the head (and any early chunks)
        client = request.transport
        assert client is not None

        def sink(chunk: bytes) -> None:  # the chunked framing aiohttp's writer would add
            client.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

        leg.sink = sink
        if await leg.done:
            idle.append(leg)
        elif leg.transport is not None:
            leg.transport.close()
        await answer.write_eof()
        return answer

    relay = via_aiohttp if mode == "aiohttp" else via_protocol

    async def handle(request: web.Request) -> web.StreamResponse:
        return await relay(request, await request.read())

    async def session(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
            app["session"] = client
            yield

    app = web.Application()
    app.cleanup_ctx.append(session)
    app.router.add_post(PATH, handle)

    if cores:
        os.sched_setaffinity(0, cores)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- the load and the measurement -------------------------------------------------------


async def load(port: int, streams: int, requests: int) -> int:
    """Stream ``requests`` answers with ``streams`` clients; the events received."""
    started = events = 0
    url = f"http://127.0.0.1:{port}{PATH}"
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> None:
            nonlocal started, events
            while started < requests:
                started += 1
                async with session.post(url, data=b'{"prompt": "x", "stream": true}') as resp:
                    async for chunk in resp.content.iter_any():
                        events += chunk.count(b"data: ")

        await asyncio.gather(*(client() for _ in range(streams)))
    return events


def wait_listening(port: int, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listened on 127.0.0.1:{port} within {deadline_s:g} s")


def measure(mode: str, streams: int, args: argparse.Namespace) -> dict[str, Any]:
    """One row: the relay on the first core, the upstream and this load on the others."""
    relay_core, other_cores = plan_cores()
    if other_cores:
        os.sched_setaffinity(0, other_cores)
    ctx = multiprocessing.get_context("spawn")
    up_port, relay_port = free_port(), free_port()
    gap_s = args.gap_ms / 1e3
    upstream = ctx.Process(target=serve_upstream, args=(up_port, args.tokens, gap_s, other_cores))
    relay = ctx.Process(target=serve_relay, args=(relay_port, up_port, mode, relay_core))
    upstream.start()
    relay.start()
    try:
        wait_listening(up_port)
        wait_listening(relay_port)
        asyncio.run(load(relay_port, streams, max(streams, args.requests // 10)))  # warm-up
        assert relay.pid is not None
        user0, sys0 = cpu_times(relay.pid)
        start = time.monotonic()
        events = asyncio.run(load(relay_port, streams, args.requests))
        wall = time.monotonic() - start
        user1, sys1 = cpu_times(relay.pid)
    finally:
        for proc in (relay, upstream):
            proc.terminate()
            proc.join(5)
    user, system = user1 - user0, sys1 - sys0
    expected = args.requests * (args.tokens + 1)
    if events != expected:
        raise SystemExit(f"{mode} at {streams} streams relayed {events} events, not {expected}")
    return {"mode": mode, "streams": streams, "events": events, "wall_s": wall,
            "user_s": user, "sys_s": system,
            "cpu_s_per_1k": (user + system) / events * 1e3}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--streams", default="50,200", help="concurrent streams per level")
    p.add_argument("--requests", type=int, default=2000, help="measured requests per row")
    p.add_argument("--tokens", type=int, default=64, help="SSE events per answer (64)")
    p.add_argument("--gap-ms", type=float, default=4.0, help="between events (4 ms)")
    args = p.parse_args(argv)
    levels = [int(x) for x in args.streams.split(",") if x]
    print(f"bare one-leg relays on uvloop, the relay on a core of its own; {args.tokens} events an "
          f"answer, {args.gap_ms:g} ms apart; {args.requests} requests a row")  # fmt: skip
    print(f"{'streams':>7} {'relay':>9} {'events':>8} {'cpu-s/1k':>9} {'user':>6} {'sys':>6}")
    for streams in levels:
        rows = {mode: measure(mode, streams, args) for mode in MODES}
        for row in rows.values():
            cpu = row["user_s"] + row["sys_s"]
            print(f"{streams:>7} {row['mode']:>9} {row['events']:>8} "
                  f"{row['cpu_s_per_1k']:>9.4f} {row['user_s'] / cpu:>6.0%} "
                  f"{row['sys_s'] / cpu:>6.0%}", flush=True)  # fmt: skip
        ratio = rows["aiohttp"]["cpu_s_per_1k"] / rows["protocol"]["cpu_s_per_1k"]
        print(f"{streams:>7} aiohttp / protocol: {ratio:.2f}x the CPU per relayed event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
