"""Fuzzed requests through a real router and engines on loopback: request bodies
(completions, chat, the Responses API), the headers around them, and the timing of every
byte (trickled, stalled, abandoned, broken framing). For every example: no 5xx, no error
or traceback in the router's log, and once the client is done no admission slot and no
connection left behind. Each suite prints its corpus size and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.router.config import RouterConfig, Timeouts
from tandem.router.connections import CONNECTIONS, ConnectionGuard
from tests.router.conftest import MODEL, RouterHandle, SimEngine, start_sim, start_static_router

#: The router's deadlines here: short, so stalls pass them, and far above the few
#: milliseconds a well-behaved client's pieces take even on a busy machine.
TIMEOUTS = Timeouts(
    connect_s=2.0,
    prefill_s=10.0,
    first_token_s=10.0,
    idle_stream_s=5.0,
    request_header_s=1.0,
    request_body_s=1.5,
    client_idle_s=2.0,
)
#: A stall: longer than either client deadline.
STALL_S = 2.0
#: How long the client waits for anything before the example fails.
BOUND_S = 30.0
CLIENT = "127.0.0.4"
BODY_EXAMPLES = 120
TIMING_EXAMPLES = 50


class LogErrors(logging.Handler):
    """Every record at ERROR or above, or with a traceback, from the router and aiohttp."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def take(self) -> list[str]:
        found = [f"{r.name}: {r.getMessage()} {r.exc_info!r}" for r in self.records]
        self.records.clear()
        return found


@dataclass
class FuzzRouter:
    """A router with a prefill and a decode engine, on a thread's own event loop, so
    hypothesis drives plain functions and one router serves every example."""

    loop: asyncio.AbstractEventLoop
    handle: RouterHandle
    engines: list[SimEngine]
    session: aiohttp.ClientSession
    errors: LogErrors
    stats: dict[str, float] = field(default_factory=dict)

    def call(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=4 * BOUND_S)

    @property
    def guard(self) -> ConnectionGuard:
        return self.handle.serving.runner.app[CONNECTIONS]

    async def post(self, path: str, raw: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.handle.url + path, data=raw, headers=headers) as resp:
            return resp.status, await resp.read()

    async def settled(self) -> None:
        """Wait (bounded) until no request holds a slot and no client connection is open."""
        async with asyncio.timeout(BOUND_S):
            while self.handle.router.admission.total or self.guard.by_address.get(CLIENT):  # noqa: ASYNC110 - state of other tasks, no event to wait on
                await asyncio.sleep(0.02)

    def count(self, suite: str) -> None:
        if f"{suite}_t0" not in self.stats:
            self.stats[f"{suite}_t0"] = time.perf_counter()
        self.stats[suite] = self.stats.get(suite, 0) + 1

    def report(self, suite: str, what: str) -> None:
        elapsed = time.perf_counter() - self.stats[f"{suite}_t0"]
        print(f"\nfuzz, router {what}: {int(self.stats[suite])} examples in {elapsed:.1f} s")


@pytest.fixture(scope="module")
def fuzz_router() -> Iterator[FuzzRouter]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result(timeout=60)

    async def start() -> tuple[RouterHandle, list[SimEngine], aiohttp.ClientSession]:
        engines = [await start_sim("prefill"), await start_sim("decode")]
        urls = {"prefill": [engines[0].url], "decode": [engines[1].url]}
        config = RouterConfig(max_body_bytes=64 * 1024, timeouts=TIMEOUTS,
                              max_connections_per_client=8)  # fmt: skip
        handle = await start_static_router(config, urls)
        return handle, engines, aiohttp.ClientSession()

    errors = LogErrors()
    loggers = [logging.getLogger(name) for name in ("tandem", "aiohttp")]
    for logger in loggers:
        logger.addHandler(errors)
    handle, engines, session = call(start())
    try:
        yield FuzzRouter(loop, handle, engines, session, errors)
    finally:

        async def stop() -> None:
            await session.close()
            await handle.serving.stop()
            for engine in engines:
                await engine.stop()

        call(stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        for logger in loggers:
            logger.removeHandler(errors)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=16,
)  # fmt: skip
not_an_int = json_values.filter(
    lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, int))
)
#: Output caps stay small (or invalid): a valid body must not generate for minutes.
small_counts = st.integers(-2, 6) | not_an_int
sampling = {
    "stream": st.booleans(),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "seed": st.integers(0, 2**31),
    "n": st.integers(0, 2),
    "min_tokens": st.integers(-1, 3),
}
completion = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "prompt": st.text(min_size=1, max_size=60)
        | st.lists(st.integers(0, 50_000), min_size=1, max_size=8)
        | st.lists(st.text(max_size=10), min_size=1, max_size=2),
        "max_tokens": st.integers(1, 6),
    },
    optional=sampling,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=40)}
)
chat = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.lists(message, min_size=1, max_size=3),
        "max_tokens": st.integers(1, 6),
    },
    optional=sampling,
)
responses = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "input": st.text(min_size=1, max_size=60) | st.lists(message, min_size=1, max_size=3),
        "max_output_tokens": st.integers(1, 6),
    },
    optional={
        "stream": st.booleans(),
        "instructions": st.text(max_size=20),
        "store": st.booleans(),
        "background": st.booleans(),
        "temperature": st.floats(0, 2),
    },
)
#: Fields whose values get replaced by anything at all.
mutable = st.sampled_from(
    ["model", "prompt", "messages", "input", "instructions", "stream", "stream_options",
     "max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens", "temperature",
     "n", "kv_transfer_params", "priority", "logprobs", "stop", "background"]
)  # fmt: skip
#: Output caps a mutation may set (kept small: a valid body must not generate for minutes).
CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def mutate(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """The body with ``changes``, every output cap small (each API ignores the others' caps,
    and a body may be sent to another API's endpoint)."""
    body, changes = pair
    out = {**body, **changes}
    for name in CAPS:
        value = out.get(name)
        if value is None or type(value) is int:
            out[name] = min(max(value or 1, -2), 6)
    return out


PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/responses")


def path_for(body: Any, swap: int) -> str:
    """The body's own endpoint (``swap`` 0), or another one."""
    own = 0
    if isinstance(body, dict):
        own = 2 if "input" in body else 1 if "messages" in body else 0
    return PATHS[(own + swap) % 3]


bodies = st.tuples(
    completion | chat | responses,
    st.just({})
    | st.dictionaries(mutable, json_values, min_size=1, max_size=2)
    | st.dictionaries(st.sampled_from(CAPS), small_counts),
).map(mutate)
#: (path, raw body): mostly the body's own endpoint, sometimes another one.
requests = st.tuples(bodies | json_values, st.sampled_from([0, 0, 0, 0, 1, 2])).map(
    lambda pair: (path_for(pair[0], pair[1]), json.dumps(pair[0]).encode())
) | st.tuples(st.sampled_from(PATHS), st.binary(max_size=200))


@settings(
    max_examples=BODY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests)
def test_fuzzed_bodies_get_4xx_never_5xx(
    fuzz_router: FuzzRouter, request: tuple[str, bytes]
) -> None:
    box = fuzz_router
    box.count("bodies")
    path, raw = request
    status, answer = box.call(box.post(path, raw))
    assert status < 500, (status, raw, answer)
    if status >= 400:
        assert "error" in json.loads(answer)
    box.call(box.settled())
    assert box.errors.take() == [], raw
    if box.stats["bodies"] == BODY_EXAMPLES:
        box.report("bodies", "request bodies")


@dataclass(frozen=True)
class Timed:
    """One client's bytes and how it sends them."""

    pieces: tuple[bytes, ...]
    delays_s: tuple[float, ...]
    """Before each piece."""
    abandon_after: int | None
    """Close after this many pieces instead of waiting for the answer."""
    complete: bool
    """The bytes make a whole request (else the router waits for the rest, then gives up)."""

    @property
    def stalls(self) -> bool:
        return any(d >= STALL_S for d in self.delays_s)


HEADER_NAMES = st.sampled_from(["x-tandem-priority-class", "X-Request-Id", "Authorization",
                                "Accept", "X-Junk", "Expect", "Content-Encoding"])  # fmt: skip
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


@st.composite
def timed_requests(draw: st.DrawFn) -> Timed:
    path, body = draw(requests)
    framing = draw(st.sampled_from(["length", "length", "chunked", "short", "bad-chunks"]))
    extra = draw(st.lists(st.tuples(HEADER_NAMES, header_values), max_size=3))
    lines = [f"POST {path} HTTP/1.1", "Host: router", "Connection: close",
             "Content-Type: application/json"]  # fmt: skip
    lines += [f"{name}: {value.strip()}" for name, value in extra]
    complete = True
    if framing == "length":
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    elif framing == "short":  # promises more than it sends
        lines.append(f"Content-Length: {len(body) + draw(st.integers(1, 100))}")
        payload, complete = body, False
    else:
        lines.append("Transfer-Encoding: chunked")
        size = draw(st.integers(1, 64))
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        if framing == "bad-chunks":
            payload = payload.replace(b"\r\n", b"\n", draw(st.integers(1, 3)))
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=4))))
    bounds = [0, *cuts, len(data)]
    pieces = tuple(data[a:b] for a, b in itertools.pairwise(bounds) if b > a)
    pause = st.sampled_from([0.0, 0.0, 0.0, 0.005, 0.02])
    delays = [draw(pause) for _ in pieces]
    if len(pieces) > 1 and draw(st.integers(0, 4)) == 0:  # now and then, one stall
        delays[draw(st.integers(1, len(pieces) - 1))] = STALL_S
    abandon = draw(st.none() | st.integers(0, len(pieces))) if draw(st.booleans()) else None
    return Timed(pieces, tuple(delays), abandon, complete)


async def exchange(timed: Timed, port: int) -> bytes | None:
    """Send ``timed`` from :data:`CLIENT`; the router's answer (``b""``: it closed without
    one; ``None``: the client hung up first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(CLIENT, 0))
    try:
        for i, (piece, delay_s) in enumerate(zip(timed.pieces, timed.delays_s, strict=True)):
            if timed.abandon_after == i:
                return None
            await asyncio.sleep(delay_s)
            try:
                writer.write(piece)
                await writer.drain()
            except ConnectionError:
                break  # the router hung up on a stalled client
        if timed.abandon_after == len(timed.pieces):
            return None
        got = b""
        async with asyncio.timeout(BOUND_S):
            with contextlib.suppress(ConnectionError):
                while chunk := await reader.read(65536):
                    got += chunk
        return got
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.mark.slow
@settings(
    max_examples=TIMING_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(timed=timed_requests())
def test_fuzzed_timing_and_framing_never_crash_or_leak(
    fuzz_router: FuzzRouter, timed: Timed
) -> None:
    """Trickled, stalled, abandoned and badly framed requests: an answer below 500 or a
    closed connection, nothing in the log, and no slot or socket left once it is over."""
    box = fuzz_router
    box.count("timing")
    answer = box.call(exchange(timed, box.handle.serving.port))
    if answer:
        status = int(answer.split(b" ", 2)[1])
        assert status < 500, answer[:300]
    if answer is not None and timed.complete and not timed.stalls:
        assert answer, "a whole request sent in time gets an answer, not a hang-up"
    box.call(box.settled())  # no admission slot and no connection held past its deadline
    assert box.errors.take() == [], timed
    if box.stats["timing"] == TIMING_EXAMPLES:
        box.report("timing", "timing and framing")
