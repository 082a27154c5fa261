"""Fuzzed request bodies (completions, chat, the Responses API) through a real router and
engines: a 4xx or a 200, never a 5xx."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.router.config import RouterConfig
from tests.router.conftest import MODEL, RouterHandle, SimEngine, start_sim, start_static_router

Post = Callable[[str, bytes], tuple[int, bytes]]


@pytest.fixture(scope="module")
def post() -> Iterator[Post]:
    """``post(path, body) -> (status, body)`` to a router with a prefill and a decode engine.

    Router, engines and client run on a thread's own event loop, so hypothesis drives a
    plain function and one router serves every example.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result(timeout=30)

    async def start() -> tuple[RouterHandle, list[SimEngine], aiohttp.ClientSession]:
        engines = [await start_sim("prefill"), await start_sim("decode")]
        urls = {"prefill": [engines[0].url], "decode": [engines[1].url]}
        handle = await start_static_router(RouterConfig(max_body_bytes=64 * 1024), urls)
        return handle, engines, aiohttp.ClientSession()

    handle, engines, session = call(start())

    async def send(path: str, raw: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        async with session.post(handle.url + path, data=raw, headers=headers) as resp:
            return resp.status, await resp.read()

    try:
        yield lambda path, raw: call(send(path, raw))  # type: ignore[no-any-return]
    finally:

        async def stop() -> None:
            await session.close()
            await handle.serving.stop()
            for engine in engines:
                await engine.stop()

        call(stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


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
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests)
def test_fuzzed_bodies_get_4xx_never_5xx(post: Post, request: tuple[str, bytes]) -> None:
    path, raw = request
    status, answer = post(path, raw)
    assert status < 500, (status, raw, answer)
    if status >= 400:
        assert "error" in json.loads(answer)
