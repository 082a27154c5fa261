"""One real aggregated vLLM engine (0.32.0, CPU build) serving the tiny Llama.

What these assert is about vLLM 0.32.0 unless a test says otherwise; where Tandem's
reference sheet (vLLM 0.34.0) says something else, the test names the difference.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import openai
import pytest

from tests.vllm.engines import SERVED_NAME, VllmEngine
from tests.vllm.survey import metric_sum, summarize_metrics

# The first test of the module also pays for the engine's start (about a minute alone).
pytestmark = pytest.mark.timeout(600)


def client_for(engine: VllmEngine) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=engine.base_url, api_key="unused", max_retries=0, timeout=60)


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def metrics_of(engine: VllmEngine) -> str:
    async with aiohttp.ClientSession() as session, session.get(engine.url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def test_chat_uses_the_chat_template(aggregated: VllmEngine) -> None:
    messages = [{"role": "user", "content": "Hello there"}]
    async with aiohttp.ClientSession() as session:
        body = {"model": SERVED_NAME, "messages": messages}
        async with session.post(aggregated.url + "/tokenize", json=body) as resp:
            tokenized = await resp.json()
    client = client_for(aggregated)
    answer = await client.chat.completions.create(
        model=SERVED_NAME,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=6,
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content, "the tiny model writes printable text"
    # The tiny model never emits eos: every request runs to its limit.
    assert choice.finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 6
    # bos + "<|start|>user\n" + "Hello there" + "<|end|>\n" + "<|start|>assistant\n"
    assert answer.usage.prompt_tokens == tokenized["count"] > 6
    assert tokenized["tokens"][0] == 0, "the template opens with bos (id 0)"


async def test_completions_count_prompt_tokens_with_bos(aggregated: VllmEngine) -> None:
    answer = await client_for(aggregated).completions.create(
        model=SERVED_NAME, prompt="Hello there", max_tokens=5
    )
    assert answer.object == "text_completion"
    assert answer.id.startswith("cmpl-")
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 5)


async def test_chat_stream_with_usage(aggregated: VllmEngine) -> None:
    stream = await client_for(aggregated).chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": "Stream, please"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    # One delta per token (every token of the tiny model is printable text), unless the
    # server coalesced tokens because the client read late: vLLM merges pending outputs.
    assert 1 <= len(content) <= 5
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["length"]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.completion_tokens == 5
    assert {c.id for c in chunks} == {chunks[0].id}


async def test_completion_stream_with_usage(aggregated: VllmEngine) -> None:
    stream = await client_for(aggregated).completions.create(
        model=SERVED_NAME,
        prompt="Stream, please",
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert 1 <= len([t for t in texts if t]) <= 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4


async def test_models_version_and_health(aggregated: VllmEngine) -> None:
    models = await get_json(aggregated.url + "/v1/models")
    assert [m["id"] for m in models["data"]] == [SERVED_NAME]
    assert models["data"][0]["max_model_len"] == 2048
    assert models["data"][0]["owned_by"] == "vllm"
    assert await get_json(aggregated.url + "/version") == {"version": "0.32.0"}
    async with aiohttp.ClientSession() as session:
        for method in ("GET", "POST"):
            async with session.request(method, aggregated.url + "/ping") as resp:
                assert resp.status == 200
        async with session.get(aggregated.url + "/health") as resp:
            assert resp.status == 200
            assert await resp.read() == b""


async def test_metrics_expose_the_series_tandem_reads(aggregated: VllmEngine) -> None:
    await client_for(aggregated).completions.create(
        model=SERVED_NAME, prompt="count me", max_tokens=3
    )
    text = await metrics_of(aggregated)
    families = summarize_metrics(text)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:prompt_tokens_by_source": "counter",
        "vllm:request_success": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
    }
    assert {name: families.get(name, {}).get("type") for name in expected} == expected
    assert families["vllm:num_requests_running"]["labels"] == ["engine", "model_name"]
    assert metric_sum(text, "vllm:request_success_total", finished_reason="length") >= 1
    # Removed before 0.32 as before 0.34 (VLLM.md): the old names must not come back.
    for gone in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"):
        assert gone not in families


async def test_a_client_disconnect_aborts_the_request(aggregated: VllmEngine) -> None:
    """vLLM 0.32.0: the request stops soon after the disconnect, and is NOT counted in
    ``vllm:request_success_total{finished_reason="abort"}`` (the frontend aborts it; the
    engine core never reports it as finished). The simulated engine counts it; VLLM.md
    lists ``abort`` among the reasons without saying when.

    ``n: 8`` makes the request long (8 x 2000 tokens, about 10 s on two cores) next to
    the time vLLM takes to notice a closed connection (up to a second or two)."""
    n, max_tokens = 8, 2000
    before = await metrics_of(aggregated)
    body = {"model": SERVED_NAME, "prompt": "Go on", "max_tokens": max_tokens, "n": n,
            "stream": True}  # fmt: skip
    async with (
        aiohttp.ClientSession() as session,
        session.post(aggregated.url + "/v1/completions", json=body) as resp,
    ):
        events = 0
        async for line in resp.content:
            events += line.startswith(b"data: ")
            if events == 3:
                break
        resp.close()
    deadline = time.monotonic() + 20
    while True:
        text = await metrics_of(aggregated)
        if metric_sum(text, "vllm:num_requests_running") == 0:
            break
        assert time.monotonic() < deadline, "the request still runs 20 s after the disconnect"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    after = await metrics_of(aggregated)
    tokens = "vllm:generation_tokens_total"
    generated = metric_sum(after, tokens) - metric_sum(before, tokens)
    assert 3 <= generated < n * max_tokens / 2, f"{generated} tokens: the request ran on"
    assert metric_sum(after, tokens) == metric_sum(text, tokens), "generation went on"
    aborts = "vllm:request_success_total"
    assert metric_sum(after, aborts, finished_reason="abort") == metric_sum(
        before, aborts, finished_reason="abort"
    ), "vLLM 0.32.0 does not count client aborts"
