"""The whole surface clients point at vLLM, through the router over loopback: the Responses
API on the P/D path (the ``openai`` client, streaming and not), the utility endpoints
relayed, ``/ping`` and ``/load``, JSON for what is not served, and bodies read as vLLM reads
them (the engine judges what the router does not need)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from tandem.router.config import RouterConfig, Timeouts
from tests.router.conftest import MODEL, Factory, RouterHandle, metric_value, spawn_sim

pytestmark = pytest.mark.asyncio

BOUND_S = 30.0
INSTRUCTIONS = "Answer in one short paragraph."
QUESTION = "Why do prefill and decode run on separate pools? " * 8


def client_for(handle: RouterHandle) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=handle.base_url, api_key="unused", max_retries=0, timeout=BOUND_S)


async def post(url: str, body: Any, **kwargs: Any) -> tuple[int, Mapping[str, str], Any]:
    """Status, headers and JSON (or text) of one call."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **kwargs.pop("headers", {})}
    return await request("POST", url, data=raw, headers=headers, **kwargs)


async def request(method: str, url: str, **kwargs: Any) -> tuple[int, Mapping[str, str], Any]:
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.request(method, url, **kwargs) as resp,
    ):
        text = await resp.text()
        try:
            return resp.status, resp.headers.copy(), json.loads(text)
        except ValueError:
            return resp.status, resp.headers.copy(), text


async def test_responses_create_goes_through_prefill_and_decode(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    prefill, decode = handle.engines
    async with asyncio.timeout(BOUND_S):
        answer = await client_for(handle).responses.create(
            model=MODEL, instructions=INSTRUCTIONS, input=QUESTION, max_output_tokens=9
        )
    assert answer.status == "incomplete" and answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens"
    assert answer.output_text and answer.usage is not None
    assert answer.usage.output_tokens == 9
    p_stats, d_stats = (await prefill.stats())["engine"], (await decode.stats())["engine"]
    # the prefill engine computed the prompt; the decode engine pulled it and recomputed
    # only the last prompt token
    assert p_stats["prompt_tokens_local_compute_total"] == answer.usage.input_tokens
    assert d_stats["prompt_tokens_external_total"] == answer.usage.input_tokens - 1
    assert d_stats["generation_tokens_total"] == 9
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_total", code="200") == 1
    assert metric_value(text, "tandem_router_retries_total") == 0


async def test_responses_stream_through_the_router(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    async with asyncio.timeout(BOUND_S):
        stream = await client_for(handle).responses.create(
            model=MODEL, input=[{"role": "user", "content": QUESTION}], max_output_tokens=7,
            stream=True,
        )  # fmt: skip
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert deltas and final.output_text == deltas
    assert final.usage is not None and final.usage.output_tokens == 7
    decode_stats = (await handle.engines[1].stats())["engine"]
    assert decode_stats["prompt_tokens_external_total"] == final.usage.input_tokens - 1
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_time_to_first_token_seconds_count") == 1
    assert metric_value(text, "tandem_router_requests_total", code="200") == 1


async def test_a_broken_responses_stream_ends_with_an_error_event() -> None:
    from tests.router.conftest import start_sim, start_static_router

    decode = await spawn_sim("decode")
    prefill = await start_sim("prefill")
    timeouts = Timeouts(connect_s=1.0, prefill_s=5.0, first_token_s=5.0, idle_stream_s=0.5)
    handle = await start_static_router(
        RouterConfig(timeouts=timeouts, scrape_interval_s=0.2),
        {"prefill": [prefill.url], "decode": [decode.url]},
    )
    try:
        body = {"model": MODEL, "input": QUESTION, "max_output_tokens": 4000, "stream": True}
        async with (
            asyncio.timeout(BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(handle.base_url + "/responses", json=body) as resp,
        ):
            assert resp.status == 200
            await resp.content.readany()
            decode.signal(signal.SIGSTOP)  # alive but silent
            raw = await resp.read()
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        assert b"[DONE]" not in raw  # Responses streams have none
        assert events[-1].startswith(b"event: error\ndata: ")
        error = json.loads(events[-1].split(b"data: ", 1)[1])
        assert error["type"] == "error" and error["error"]["code"] == 504
    finally:
        await handle.serving.stop()
        await prefill.stop()
        await decode.stop()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tokenize", {"model": MODEL, "prompt": "Hello there", "return_token_strs": True}),
        ("/tokenize", {"messages": [{"role": "user", "content": "Hello there"}]}),
        ("/tokenize", {"model": "nope", "prompt": "x"}),
        ("/tokenize", {}),
        ("/detokenize", {"tokens": [5509573740, 6159365224, 23425637]}),
        ("/detokenize", {"tokens": [-1]}),
    ],
)
async def test_utility_calls_answer_as_the_engine_does(
    pd_router: Factory, path: str, body: dict[str, Any]
) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    direct = await post(handle.engines[1].url + path, body)
    routed = await post(handle.url + path, body)
    assert routed[0] == direct[0] and routed[2] == direct[2]
    assert routed[1]["X-Request-Id"]


async def test_version_ping_and_load(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    status, _, version = await request("GET", handle.url + "/version")
    assert status == 200 and version == {"version": "0.34.0"}
    for method in ("GET", "POST"):
        status, _, health = await request(method, handle.url + "/ping")
        assert status == 200 and health["status"] == "ok"
    status, _, load = await request("GET", handle.url + "/load")
    assert status == 200 and load == {"server_load": 0}


async def test_load_counts_requests_in_flight(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    body = {"model": MODEL, "prompt": QUESTION, "max_tokens": 2000, "stream": True}
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(handle.base_url + "/completions", json=body) as resp,
    ):
        await resp.content.readany()
        _, _, load = await request("GET", handle.url + "/load")
        assert load == {"server_load": 1}


async def test_what_is_not_served_is_openai_shaped_json(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    for method, path in (("GET", "/nope"), ("POST", "/v1/embeddings"), ("POST", "/sleep")):
        status, headers, body = await request(method, handle.url + path)
        assert status == 404 and headers["Content-Type"].startswith("application/json")
        assert body["error"]["type"] == "NotFoundError" and body["error"]["code"] == 404
        assert path in body["error"]["message"] and "/v1/responses" in body["error"]["message"]
    status, headers, body = await request("GET", handle.url + "/v1/completions")
    assert status == 405 and headers["Allow"] == "POST"
    assert body["error"]["code"] == 405 and "allowed: POST" in body["error"]["message"]


async def test_utility_calls_survive_a_dead_engine(pd_router: Factory) -> None:
    dead = await spawn_sim("decode")
    await dead.kill()
    handle = await pd_router(
        RouterConfig(timeouts=Timeouts(connect_s=1.0)), prefill=["prefill"],
        decode=[dead, "decode"],
    )  # fmt: skip
    for _ in range(4):  # whichever engine is drawn first, the live one answers
        status, _, body = await post(handle.url + "/tokenize", {"prompt": "abcdefgh"})
        assert status == 200 and body["count"] == 2


LAX = [
    # vLLM reads these with pydantic's lax rules and serves them
    ("/completions", {"prompt": QUESTION, "max_tokens": "5", "stream": "true"}),
    ("/chat/completions", {"messages": [{"role": "user", "content": QUESTION}],
                           "max_completion_tokens": 5.0, "stream": "yes"}),
    ("/responses", {"input": QUESTION, "max_output_tokens": "5", "stream": 1}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), LAX)
async def test_lax_values_are_served_through_both_legs(
    pd_router: Factory, path: str, body: dict[str, Any]
) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(handle.base_url + path, json={"model": MODEL, **body}) as resp,
    ):
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await resp.read()
    prefill_stats = (await handle.engines[0].stats())["engine"]
    assert prefill_stats["prompt_tokens_local_compute_total"] > 0  # the P/D path was taken
    assert (await handle.engines[1].stats())["engine"]["generation_tokens_total"] == 5


JUDGED = [
    # the engine's own answer, exactly: fields the router does not need...
    ("/chat/completions", {"messages": []}),
    ("/chat/completions", {"messages": "hi"}),
    ("/completions", {"prompt": 5}),
    ("/completions", {"prompt": "x", "model": "nope"}),
    ("/responses", {"max_output_tokens": 2}),
    # ...and values the prefill rewrite would hide from a prefill engine
    ("/completions", {"prompt": "x", "max_tokens": 0}),
    ("/completions", {"prompt": "x", "max_tokens": "ten"}),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": "maybe"}),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                           "min_tokens": 5}),
    ("/completions", {"prompt": "x", "stream_options": {"include_usage": True}}),
    ("/responses", {"input": "x", "max_output_tokens": 0}),
    ("/responses", {"input": "x", "background": True, "store": False}),
    ("/responses", {"input": "x", "background": True}),
    ("/responses", {"input": "x", "previous_response_id": "resp_gone"}),
    # and what the router refuses itself, in vLLM's words
    ("/completions", b'{"prompt": "x", "max_tokens": }'),
    ("/chat/completions", b"[1, 2]"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), JUDGED)
async def test_refusals_are_the_engines_own(
    pd_router: Factory, path: str, body: dict[str, Any] | bytes
) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    if isinstance(body, dict):
        body = {"model": MODEL, **body}
    direct = await post(handle.engines[1].url + "/v1" + path, body)
    routed = await post(handle.base_url + path, body)
    assert direct[0] == 400 or direct[0] == 404, direct
    assert routed[0] == direct[0] and routed[2] == direct[2]
    assert routed[1]["X-Request-Id"]
    # nothing reached a prefill engine only to be thrown away
    prefill_stats = (await handle.engines[0].stats())["engine"]
    assert prefill_stats["prompt_tokens_local_compute_total"] == 0
