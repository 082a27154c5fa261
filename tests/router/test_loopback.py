"""The router between the openai client and simulated prefill/decode engines, for real."""

from __future__ import annotations

import json

import aiohttp
import pytest
from openai import AsyncOpenAI, NotFoundError

from tandem.router.config import RouterConfig
from tests.router.conftest import MODEL, Factory, metric_value

pytestmark = pytest.mark.asyncio

MESSAGES = [{"role": "user", "content": "Tell me about prefill and decode. " * 20}]


def client_for(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)


async def test_chat_non_streaming_hands_kv_from_prefill_to_decode(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    prefill, decode = handle.engines
    answer = await client_for(handle.base_url).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=12
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant" and choice.message.content
    assert answer.usage is not None and answer.usage.completion_tokens == 12
    p_stats, d_stats = (await prefill.stats())["engine"], (await decode.stats())["engine"]
    # the prefill engine computed the prompt; the decode engine pulled it over the
    # handoff and recomputed only the last prompt token
    assert p_stats["prompt_tokens_local_compute_total"] == answer.usage.prompt_tokens
    assert d_stats["prompt_tokens_external_total"] == answer.usage.prompt_tokens - 1
    assert d_stats["generation_tokens_total"] == 12


async def test_chat_streaming_is_complete_and_well_formed(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    stream = await client_for(handle.base_url).chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    content, finish, usage, roles = [], None, None, []
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            content.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert roles == ["assistant"] and "".join(content)
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 16
    decode_stats = (await handle.engines[1].stats())["engine"]
    assert decode_stats["prompt_tokens_external_total"] == usage.prompt_tokens - 1
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_total", code="200") == 1
    assert metric_value(text, "tandem_router_time_to_first_token_seconds_count") == 1
    assert metric_value(text, "tandem_router_kv_handoff_seconds_count") == 1
    assert metric_value(text, "tandem_router_inter_token_latency_seconds_count") > 0


async def test_completions_streaming_and_not(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    client = client_for(handle.base_url)
    answer = await client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=7)
    assert answer.choices[0].text and answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 7
    stream = await client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=9, stream=True
    )
    pieces = [c.choices[0].text async for c in stream if c.choices]
    assert len("".join(pieces)) > 0
    decode_stats = (await handle.engines[1].stats())["engine"]
    assert decode_stats["generation_tokens_total"] == 7 + 9
    assert decode_stats["prompt_tokens_external_total"] > 0


async def test_relayed_bytes_are_the_engines_sse(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 5, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(handle.base_url + "/completions", json=body) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        request_id = resp.headers["X-Request-Id"]
        raw = await resp.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert all(c["id"] == f"cmpl-{request_id}" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_aggregated_pool(pd_router: Factory) -> None:
    handle = await pd_router(RouterConfig(mode="aggregated"), pool=["pool", "pool"])
    client = client_for(handle.base_url)
    for _ in range(4):
        answer = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
        assert answer.choices[0].finish_reason == "length"
    served = [(await e.stats())["engine"]["generation_tokens_total"] for e in handle.engines]
    assert sum(served) == 16


async def test_short_prompts_skip_prefill(pd_router: Factory) -> None:
    handle = await pd_router(
        RouterConfig(short_prompt_tokens=10_000), prefill=["prefill"], decode=["decode"]
    )
    answer = await client_for(handle.base_url).completions.create(
        model=MODEL, prompt="short", max_tokens=3
    )
    assert answer.choices[0].finish_reason == "length"
    prefill_stats, decode_stats = [(await e.stats())["engine"] for e in handle.engines]
    assert prefill_stats["prompt_tokens_total"] == 0
    assert decode_stats["prompt_tokens_external_total"] == 0


async def test_engine_4xx_passes_through(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    with pytest.raises(NotFoundError) as err:
        await client_for(handle.base_url).chat.completions.create(
            model="no-such-model", messages=MESSAGES, max_tokens=3
        )
    assert "no-such-model" in str(err.value)


async def test_models_health_and_metrics(pd_router: Factory) -> None:
    handle = await pd_router(prefill=["prefill"], decode=["decode"])
    models = await client_for(handle.base_url).models.list()
    assert [m.id for m in models.data] == [MODEL]
    async with aiohttp.ClientSession() as session, session.get(handle.url + "/health") as resp:
        assert resp.status == 200
        assert (await resp.json())["endpoints"] == {"prefill": 1, "decode": 1}
    text = await handle.metrics()
    for name in (
        "tandem_router_requests_total",
        "tandem_router_time_to_first_token_seconds",
        "tandem_router_inter_token_latency_seconds",
        "tandem_router_e2e_latency_seconds",
        "tandem_router_queue_wait_seconds",
        "tandem_router_kv_handoff_seconds",
        "tandem_router_inflight",
        "tandem_router_retries_total",
        "tandem_router_rejections_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
