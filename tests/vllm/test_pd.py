"""Real disaggregated prefill/decode: two vLLM 0.32.0 CPU engines and NIXL over UCX TCP.

The prefill engine is a ``kv_producer``, the decode engine a ``kv_consumer``; the KV of
each prompt moves from one to the other, which the decode engine's
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`` proves. Then
``tandem router`` stands in front of the pair and serves the ``openai`` client.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import openai
import pytest

from tests.vllm.engines import SERVED_NAME, VllmEngine, free_port
from tests.vllm.survey import metric_sum

pytestmark = pytest.mark.timeout(600)

PROMPT = "Disaggregated serving moves the cache from one engine to another. " * 3
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
#: The prefill leg's request for a handoff, as vLLM's toy proxy sends it.
HANDOFF = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


async def post(url: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=120)
        ) as resp,
    ):
        return resp.status, await resp.json()


async def by_source(engine: VllmEngine) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(engine.url + "/metrics") as resp:
        text = await resp.text()
    return {s: metric_sum(text, "vllm:prompt_tokens_by_source_total", source=s) for s in SOURCES}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


async def prompt_tokens(engine: VllmEngine, **body: Any) -> int:
    status, answer = await post(engine.url + "/tokenize", {"model": SERVED_NAME, **body})
    assert status == 200, answer
    count: int = answer["count"]
    return count


async def test_the_kv_of_a_prompt_moves_over_nixl(pd_pair: tuple[VllmEngine, VllmEngine]) -> None:
    prefill, decode = pd_pair
    n_prompt = await prompt_tokens(prefill, prompt=PROMPT)
    p_before, d_before = await by_source(prefill), await by_source(decode)

    status, first = await post(
        prefill.url + "/v1/completions",
        {"model": SERVED_NAME, "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": HANDOFF},
        **{"X-Request-Id": "pd-test-1"},
    )
    assert status == 200, first
    assert first["choices"][0]["finish_reason"] == "length"
    params = first["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_host"] == "127.0.0.1"
    assert params["remote_port"] == prefill.side_channel_port
    assert params["remote_block_ids"] and params["remote_engine_id"]

    status, second = await post(
        decode.url + "/v1/completions",
        {"model": SERVED_NAME, "prompt": PROMPT, "max_tokens": 6, "kv_transfer_params": params},
        **{"X-Request-Id": "pd-test-1"},
    )
    assert status == 200, second
    assert second["usage"]["completion_tokens"] == 6
    assert second["usage"]["prompt_tokens"] == n_prompt
    assert delta(await by_source(prefill), p_before)["local_compute"] == n_prompt
    moved = delta(await by_source(decode), d_before)
    assert moved["external_kv_transfer"] == n_prompt, moved


@pytest.fixture(scope="module")
def router_url(pd_pair: tuple[VllmEngine, VllmEngine]) -> Iterator[str]:
    """``tandem router --prefill P --decode D`` as a process on a free port."""
    import subprocess
    import time
    import urllib.request

    prefill, decode = pd_pair
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "router", "--port", str(port),
         "--prefill", prefill.url, "--decode", decode.url, "--log-level", "WARNING"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            stderr = process.stderr.read() if process.stderr else b""
            pytest.fail(f"tandem router exited with {process.returncode}: {stderr!r}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the router did not answer /health within 30 s"
        time.sleep(0.1)
    yield url
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
async def router_client(router_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=router_url + "/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()


async def test_the_router_serves_openai_with_the_kv_moved(
    pd_pair: tuple[VllmEngine, VllmEngine], router_client: openai.AsyncOpenAI
) -> None:
    prefill, decode = pd_pair
    messages: Any = [{"role": "user", "content": PROMPT}]
    n_chat = await prompt_tokens(prefill, messages=messages)
    n_completion = await prompt_tokens(prefill, prompt=PROMPT + "!")
    before = await by_source(decode)

    chat = await router_client.chat.completions.create(
        model=SERVED_NAME, messages=messages, max_tokens=5
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == 5
    assert chat.usage.prompt_tokens == n_chat

    # The same messages again, streamed: the decode engine may take part of the prompt
    # from its own prefix cache now; every prompt token comes from somewhere it counts.
    stream = await router_client.chat.completions.create(
        model=SERVED_NAME, messages=messages, max_tokens=4, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [c async for c in stream]
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4

    completion = await router_client.completions.create(
        model=SERVED_NAME, prompt=PROMPT + "!", max_tokens=3
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 3

    moved = delta(await by_source(decode), before)
    assert sum(moved.values()) == 2 * n_chat + n_completion, moved
    assert moved["local_compute"] == 0, f"the decode engine computed prompt tokens: {moved}"
    assert moved["external_kv_transfer"] >= n_chat + n_completion, moved


async def test_concurrent_requests_through_the_router(
    pd_pair: tuple[VllmEngine, VllmEngine], router_client: openai.AsyncOpenAI
) -> None:
    _, decode = pd_pair
    prompts = [f"Request number {i} asks about the weather in town {i}." for i in range(6)]
    before = await by_source(decode)
    answers = await asyncio.gather(
        *(
            router_client.completions.create(model=SERVED_NAME, prompt=p, max_tokens=4)
            for p in prompts
        )
    )
    assert [a.usage.completion_tokens if a.usage else None for a in answers] == [4] * 6
    total_prompt = sum(a.usage.prompt_tokens for a in answers if a.usage)
    moved = delta(await by_source(decode), before)
    assert moved["local_compute"] == 0, moved
    assert moved["external_kv_transfer"] + moved["local_cache_hit"] == total_prompt, moved
