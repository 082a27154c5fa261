"""The router's key tests on both kinds of engines: ``tandem router`` (in-process, static
pools) in front of simulated engines and in front of real vLLM prefill and decode engines
(NIXL over UCX TCP). Streaming and not, both APIs, priority classes, a decode engine
killed mid-stream, a prefill engine killed (its requests go to the other), a restarted
engine rejoining, and proof that the KV really moved: the decode engine's
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`` counts the prompts.

The real engines run ``--scheduling-policy priority`` (the classes set vLLM's
``priority``); they are the contract's prefill/decode pair plus a second prefill engine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from tandem.policy.config import LatencyTargets
from tandem.router.config import ClassConfig, RouterConfig, Timeouts
from tests.contract.conftest import _get
from tests.contract.fleet import Engine, Fleet, Kind
from tests.contract.http import metric_sum, metrics_of
from tests.contract.versions import EXTERNAL_PROMPT_TOKENS
from tests.router.conftest import RouterHandle, start_static_router
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(900)
BOUND_S = 60.0
"""Every client wait is bounded: a hang fails the test."""
ROLES = {"prefill": "prefill", "prefill2": "prefill", "decode": "decode"}
CLASSES = (ClassConfig("interactive", 0), ClassConfig("batch", 10, max_inflight=1))
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")

Router = Callable[[dict[str, Engine]], Awaitable[RouterHandle]]


@pytest.fixture
def engines(fleet: Fleet, engine_kind: Kind) -> dict[str, Engine]:
    return _get(fleet, engine_kind, ROLES)


@pytest.fixture
async def router() -> AsyncIterator[Router]:
    handles: list[RouterHandle] = []

    async def start(engines: dict[str, Engine]) -> RouterHandle:
        config = RouterConfig(
            timeouts=Timeouts(connect_s=5.0, prefill_s=60.0, first_token_s=60.0,
                              idle_stream_s=10.0),
            classes=CLASSES, default_class="interactive", send_priority=True,
            scrape_interval_s=0.2, prefix_affinity_tokens=0,
        )  # fmt: skip
        urls = {"prefill": [engines["prefill"].url, engines["prefill2"].url],
                "decode": [engines["decode"].url]}  # fmt: skip
        handle = await start_static_router(config, urls)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        await handle.serving.stop()


def client_for(handle: RouterHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key="unused", max_retries=0,
                              timeout=BOUND_S)  # fmt: skip


async def by_source(engine: Engine) -> dict[str, float]:
    text = await metrics_of(engine)
    return {s: metric_sum(text, "vllm:prompt_tokens_by_source_total", source=s) for s in SOURCES}


def moved(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def unique(text: str) -> str:
    """A prompt no engine has cached yet (the decode engine's prefix cache would count
    a repeated one as ``local_cache_hit``)."""
    return f"{time.monotonic_ns()} {text}"


async def test_both_apis_streaming_and_not_with_the_kv_moved(
    engines: dict[str, Engine], router: Router
) -> None:
    handle = await router(engines)
    client = client_for(handle)
    decode = engines["decode"]
    before = await by_source(decode)
    prompt_tokens: list[int] = []
    async with asyncio.timeout(4 * BOUND_S):
        chat = await client.chat.completions.create(
            model=SERVED_NAME, messages=[{"role": "user", "content": unique("Chat, please.")}],
            max_tokens=5,
        )  # fmt: skip
        assert chat.choices[0].finish_reason == "length" and chat.usage is not None
        assert chat.usage.completion_tokens == 5
        prompt_tokens.append(chat.usage.prompt_tokens)
        stream = await client.chat.completions.create(
            model=SERVED_NAME, messages=[{"role": "user", "content": unique("Stream it.")}],
            max_tokens=4, stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [c async for c in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == 4
        prompt_tokens.append(usage.prompt_tokens)
        completion = await client.completions.create(
            model=SERVED_NAME, prompt=unique("Complete this."), max_tokens=3
        )
        assert completion.usage is not None and completion.usage.completion_tokens == 3
        prompt_tokens.append(completion.usage.prompt_tokens)
        pieces = [c.choices[0].text for c in [x async for x in await client.completions.create(
            model=SERVED_NAME, prompt=unique("Stream a completion."), max_tokens=3, stream=True,
            stream_options={"include_usage": True})] if c.choices]  # fmt: skip
        assert pieces
    got = moved(await by_source(decode), before)
    per_request = EXTERNAL_PROMPT_TOKENS[decode.version]
    expected = sum(prompt_tokens) - (0 if per_request == "n" else len(prompt_tokens))
    # the streamed completion's prompt counts too; its usage is not known here
    assert got["external_kv_transfer"] >= expected, got
    assert got["local_cache_hit"] == 0, got
    if per_request == "n":
        assert got["local_compute"] == 0, f"the decode engine computed prompt tokens: {got}"
    text = await handle.metrics()
    assert metric_sum(text, "tandem_router_requests_total", code="200") == 4
    assert metric_sum(text, "tandem_router_retries_total") == 0


async def test_the_external_tokens_equal_the_prompt_tokens(
    engines: dict[str, Engine], router: Router
) -> None:
    handle = await router(engines)
    decode = engines["decode"]
    before = await by_source(decode)
    async with asyncio.timeout(BOUND_S):
        answer = await client_for(handle).completions.create(
            model=SERVED_NAME, prompt=unique("Count my tokens, decode engine. " * 4), max_tokens=2
        )
    assert answer.usage is not None
    n = answer.usage.prompt_tokens
    got = moved(await by_source(decode), before)
    external = n if EXTERNAL_PROMPT_TOKENS[decode.version] == "n" else n - 1
    assert got["external_kv_transfer"] == external, (n, got)
    assert got["external_kv_transfer"] + got["local_compute"] == n


async def test_priority_classes(engines: dict[str, Engine], router: Router) -> None:
    handle = await router(engines)
    config = handle.router.config
    url = handle.base_url + "/completions"
    body = {"model": SERVED_NAME, "prompt": unique("Class act."), "max_tokens": 2}
    async with asyncio.timeout(2 * BOUND_S), aiohttp.ClientSession() as session:
        for klass in ("interactive", "batch", None):
            headers = {config.priority_header: klass} if klass else {}
            async with session.post(url, json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
        # batch allows one in flight: a long one holds it, the next is refused at once.
        # The tiny model streams 270 to 530 tokens a second: 400 (as it was) could all
        # be out before the next request on a busy machine, freeing the slot. Even 1900
        # can: a test process starved for the seconds they take lets the router relay
        # them all into the socket buffers. So the router's admission is watched: a try
        # whose second request found the slot already free is tried again.
        long = {**body, "max_tokens": 1900, "stream": True, "ignore_eos": True}
        batch = {config.priority_header: "batch"}
        admission = handle.router.admission
        in_flight: list[int] = []
        admit = admission.try_admit

        def watched(klass: ClassConfig, cfg: RouterConfig) -> str | None:
            in_flight.append(admission.by_class[klass.name])
            return admit(klass, cfg)

        admission.try_admit = watched  # type: ignore[method-assign]
        for _ in range(3):
            async with session.post(url, json=long, headers=batch) as held:
                assert held.status == 200
                await held.content.readline()
                in_flight.clear()
                async with session.post(url, json=body, headers=batch) as refused:
                    if refused.status == 200 and in_flight == [0]:
                        continue  # the held stream had ended at the router: hold again
                    assert refused.status == 429 and refused.headers["Retry-After"] == "1"
                held.close()
                break
        else:
            raise AssertionError("three holds of the batch slot ended before the next request")
        async with session.post(url, json=body, headers={config.priority_header: "vip"}) as r:
            assert r.status == 400
    text = await handle.metrics()
    ok = {"class": "interactive", "code": "200"}
    assert metric_sum(text, "tandem_router_requests_total", **ok) == 2
    assert metric_sum(text, "tandem_router_rejections_total", **{"class": "batch"}) == 1


async def stream_until_killed(handle: RouterHandle, victim: Engine, events_before: int) -> Any:
    """A long stream through the router; ``victim`` is SIGKILLed after some events. The
    client's view: status and every SSE payload until the router ends the stream."""
    body = {"model": SERVED_NAME, "prompt": unique("Keep going."), "max_tokens": 1500,
            "stream": True, "ignore_eos": True}  # fmt: skip
    events: list[Any] = []
    async with (
        asyncio.timeout(BOUND_S),
        aiohttp.ClientSession() as session,
        session.post(handle.base_url + "/completions", json=body) as resp,
    ):
        status = resp.status
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
            if len(events) == events_before:
                await asyncio.to_thread(victim.kill)
    return status, events


async def serves(handle: RouterHandle) -> bool:
    try:
        async with asyncio.timeout(BOUND_S):
            answer = await client_for(handle).completions.create(
                model=SERVED_NAME, prompt=unique("Are you back?"), max_tokens=2
            )
    except openai.APIError:
        return False
    return answer.choices[0].finish_reason == "length"


async def test_a_decode_engine_killed_mid_stream_then_restarted(
    engines: dict[str, Engine], router: Router, fleet: Fleet
) -> None:
    handle = await router(engines)
    decode = engines["decode"]
    status, events = await stream_until_killed(handle, decode, 5)
    assert status == 200
    assert events[-1] == "[DONE]", "the stream ends cleanly"
    errors = [e for e in events[:-1] if "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] >= 500, events[-3:]
    assert not any(e.get("choices") and e["choices"][0]["finish_reason"] for e in events[:-1])
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(openai.APIStatusError) as failed:
            await client_for(handle).completions.create(
                model=SERVED_NAME, prompt=unique("Nobody decodes."), max_tokens=2
            )
    assert failed.value.status_code >= 500
    again = await fleet.restart(decode)
    deadline = time.monotonic() + BOUND_S
    while not await serves(handle):
        assert time.monotonic() < deadline, "the restarted decode engine did not rejoin"
        await asyncio.sleep(0.5)
    assert again.alive


async def test_a_killed_prefill_engine_sends_requests_to_the_other_then_rejoins(
    engines: dict[str, Engine], router: Router, fleet: Fleet
) -> None:
    handle = await router(engines)
    victim, survivor, decode = engines["prefill2"], engines["prefill"], engines["decode"]
    await asyncio.to_thread(victim.kill)
    before = await by_source(survivor)
    d_before = await by_source(decode)
    prompts = 0
    async with asyncio.timeout(3 * BOUND_S):
        for i in range(4):
            answer = await client_for(handle).completions.create(
                model=SERVED_NAME, prompt=unique(f"Request {i} after the kill."), max_tokens=2
            )
            assert answer.choices[0].finish_reason == "length" and answer.usage is not None
            prompts += answer.usage.prompt_tokens
    assert moved(await by_source(survivor), before)["local_compute"] == prompts
    assert moved(await by_source(decode), d_before)["local_compute"] <= 4, "the KV moved"
    again = await fleet.restart(victim)
    start = await by_source(again)
    deadline = time.monotonic() + 2 * BOUND_S
    while moved(await by_source(again), start)["local_compute"] == 0:
        assert time.monotonic() < deadline, "the restarted prefill engine got no request"
        assert await serves(handle)


def tight(first_token_s: float) -> RouterConfig:
    timeouts = Timeouts(connect_s=5.0, prefill_s=60.0, first_token_s=first_token_s,
                        idle_stream_s=10.0)  # fmt: skip
    return RouterConfig(timeouts=timeouts, scrape_interval_s=0.2, prefix_affinity_tokens=0)


async def test_an_overloaded_decode_engine_is_a_503_after_one_prefill(
    fleet: Fleet, engine_kind: Kind
) -> None:
    """The only decode engine refuses every request (``--max-num-queued-reqs 0``): the
    client gets 503 with Retry-After, after one prefill and no retry (there is no other
    decode engine). That the refusal frees the prefill engine's KV is the engines'
    contract (``test_pd.py``)."""
    engines = _get(fleet, engine_kind, {"prefill": "prefill", "decode-full": "decode"})
    prefill, full = engines["prefill"], engines["decode-full"]
    handle = await start_static_router(tight(30.0), {"prefill": [prefill.url],
                                                     "decode": [full.url]})  # fmt: skip
    try:
        body = {"model": SERVED_NAME, "prompt": unique("Anyone there? " * 30), "max_tokens": 4}
        success_before = metric_sum(await metrics_of(prefill), "vllm:request_success_total")
        async with (
            asyncio.timeout(BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(handle.base_url + "/completions", json=body) as resp,
        ):
            status, retry_after = resp.status, resp.headers.get("Retry-After")
            error = (await resp.json())["error"]
        assert (status, retry_after) == (503, "1"), error
        assert error["type"] == "ServiceUnavailableError" and "overloaded" in error["message"]
        assert "127.0.0.1" not in error["message"] and "{" not in error["message"]
        prefills = metric_sum(await metrics_of(prefill), "vllm:request_success_total")
        assert prefills - success_before == 1, "one prefill, not two"
        assert metric_sum(await handle.metrics(), "tandem_router_retries_total") == 0
    finally:
        await handle.serving.stop()


async def test_a_non_streaming_answer_longer_than_the_first_token_timeout(
    fleet: Fleet, engine_kind: Kind
) -> None:
    """1,900 tokens take longer than the 2 s first-token timeout on either engine (the
    tiny model gives 270 to 530 tokens a second on two shared cores: 3.6 to 7 s); timed by
    its first byte, the non-streaming answer failed with 504. Timed by the decode
    engine's token counters (the scraper reads them), it is answered."""
    first_s = 2.0
    engines = _get(fleet, engine_kind, {"prefill": "prefill", "decode": "decode"})
    urls = {"prefill": [engines["prefill"].url], "decode": [engines["decode"].url]}
    handle = await start_static_router(tight(first_s), urls)
    try:
        body = {"model": SERVED_NAME, "prompt": unique("Tell a long story."),
                "max_tokens": 1900, "ignore_eos": True}  # fmt: skip
        started = time.monotonic()
        async with (
            asyncio.timeout(5 * BOUND_S),
            aiohttp.ClientSession() as session,
            session.post(handle.base_url + "/completions", json=body) as resp,
        ):
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
        took_s = time.monotonic() - started
        assert answer["usage"]["completion_tokens"] == 1900
        assert took_s > first_s, f"{took_s:.1f} s: too quick to show the timeout's effect"
        assert metric_sum(await handle.metrics(), "tandem_router_retries_total") == 0
    finally:
        await handle.serving.stop()


async def test_a_prompt_absorbed_by_the_decode_engine_is_prefilled_there(
    pd: tuple[Engine, Engine],
) -> None:
    """When the prefill pool would serve a prompt past its TTFT target, the router sends
    the request whole to a decode engine (no ``kv_transfer_params``), which prefills it
    itself: a real ``kv_consumer`` vLLM engine does, and nothing moves over NIXL."""
    prefill, decode = pd
    targets = LatencyTargets(1.0, 90, 0.05, 90)
    config = RouterConfig(
        timeouts=Timeouts(connect_s=5.0, prefill_s=60.0, first_token_s=60.0, idle_stream_s=10.0),
        classes=(ClassConfig("default", targets=targets),), scrape_interval_s=0.2,
        prefix_affinity_tokens=0, prefill_tokens_per_s=25_000.0,
    )  # fmt: skip
    handle = await start_static_router(config, {"prefill": [prefill.url], "decode": [decode.url]})
    try:
        # Other routers' prompts queued on the prefill engine: 4 s of them at 25k tok/s.
        handle.router.pools["prefill"].endpoints[prefill.url].outstanding_prompt_tokens = 100_000
        before_decode, before_prefill = await by_source(decode), await by_source(prefill)
        async with asyncio.timeout(BOUND_S):
            answer = await client_for(handle).completions.create(
                model=SERVED_NAME, prompt=unique("Prefill me yourself, decode engine."),
                max_tokens=3,
            )  # fmt: skip
        assert answer.choices[0].finish_reason == "length" and answer.usage is not None
        n = answer.usage.prompt_tokens
        got = moved(await by_source(decode), before_decode)
        assert got["local_compute"] == n and got["external_kv_transfer"] == 0, (n, got)
        assert sum(moved(await by_source(prefill), before_prefill).values()) == 0
        text = await handle.metrics()
        assert metric_sum(text, "tandem_router_absorbed_requests_total") == 1
        assert metric_sum(text, "tandem_router_retries_total") == 0
        assert metric_sum(text, "tandem_router_requests_total", code="200") == 1
    finally:
        await handle.serving.stop()
