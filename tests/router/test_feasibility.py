"""The router's feasibility accounting and burst absorption, over loopback with simulated
engines: what it counts apart, what the autoscaler reads, and a request a decode engine
prefills itself."""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from tandem.observe.parse import parse_router_sample
from tandem.policy.config import LatencyTargets
from tandem.policy.feasibility import MIN_TPOT_SAMPLES
from tandem.router.config import ClassConfig, RouterConfig
from tandem.router.request import parse_request
from tests.router.conftest import MODEL, Factory, RouterHandle, metric_value

pytestmark = pytest.mark.asyncio

TARGETS = LatencyTargets(1.0, 90, 0.05, 90)


def client_for(handle: RouterHandle) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=handle.base_url, api_key="unused", max_retries=0, timeout=30)


def config(targets: LatencyTargets = TARGETS, **fields: object) -> RouterConfig:
    return RouterConfig(
        scrape_interval_s=0.2,
        classes=(ClassConfig("default", targets=targets),),
        **fields,  # type: ignore[arg-type]
    )


async def stream(handle: RouterHandle, prompt_tokens: int, max_tokens: int = 4) -> str:
    """One streamed completion of a prompt of ``prompt_tokens`` (4 bytes a token)."""
    text = []
    response = await client_for(handle).completions.create(
        model=MODEL, prompt="abcd" * prompt_tokens, max_tokens=max_tokens, stream=True
    )
    async for chunk in response:
        text.extend(c.text for c in chunk.choices)
    return "".join(text)


async def test_prompts_no_pool_size_could_serve_in_time_are_counted_apart(
    pd_router: Factory,
) -> None:
    # A declared 1,000 prompt tokens/s per replica: a 2,000-token prompt needs 2 s alone.
    handle = await pd_router(
        config(prefill_tokens_per_s=1_000.0), prefill=["prefill"], decode=["decode"]
    )
    for tokens in (2_000, 50, 60, 2_500, 40):
        assert await stream(handle, tokens)
    text = await handle.metrics()
    infeasible = "tandem_router_requests_infeasible_total"
    assert metric_value(text, infeasible, **{"class": "default", "reason": "ttft"}) == 2
    assert metric_value(text, infeasible, reason="itl") == 0
    assert metric_value(text, "tandem_router_ttft_queueing_ratio_count") == 3
    assert metric_value(text, "tandem_router_ttft_target_ratio_count") == 5
    # what the autoscaler reads of it
    sample = parse_router_sample(text, at_s=1.0).classes["default"]
    assert sample.infeasible_by_reason == {"ttft": 2.0}
    assert sample.queueing is not None and sample.queueing.count == 3
    # the least TTFT was learned from what the engines did, per prompt band
    assert handle.router.least.bands[0].samples == 3


async def test_a_per_token_allowance_makes_the_same_prompts_feasible(pd_router: Factory) -> None:
    per_token = LatencyTargets(1.0, 90, 0.05, 90, ttft_per_prompt_token_s=2e-3)
    handle = await pd_router(
        config(per_token, prefill_tokens_per_s=1_000.0), prefill=["prefill"], decode=["decode"]
    )
    for tokens in (2_000, 50):
        assert await stream(handle, tokens)
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_infeasible_total") == 0
    assert metric_value(text, "tandem_router_ttft_queueing_ratio_count") == 2
    # both answered far within 1 s + 2 ms a token
    assert metric_value(text, "tandem_router_ttft_target_ratio_bucket", le="0.5") == 2


async def test_a_decode_engine_absorbs_a_prompt_the_prefill_pool_would_serve_late(
    pd_router: Factory,
) -> None:
    handle = await pd_router(
        config(prefill_tokens_per_s=25_000.0), prefill=["prefill"], decode=["decode"]
    )
    prefill, decode = handle.engines
    queue = handle.router.pools["prefill"].endpoints[prefill.url]
    queue.outstanding_prompt_tokens = 100_000  # 4 s of other routers' prompts queued
    try:
        assert await stream(handle, 500, max_tokens=6)
    finally:
        queue.outstanding_prompt_tokens = 0
    p_stats, d_stats = (await prefill.stats())["engine"], (await decode.stats())["engine"]
    assert p_stats["prompt_tokens_total"] == 0  # the prefill engine never saw it
    assert d_stats["prompt_tokens_local_compute_total"] == 500  # the decode engine did
    assert d_stats["prompt_tokens_external_total"] == 0 and d_stats["generation_tokens_total"] == 6
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_absorbed_requests_total") == 1
    # the router's own estimate of the prompt: no prefill engine counted it
    estimate = parse_request(
        json.dumps({"model": MODEL, "prompt": "abcd" * 500}).encode(), "completions", prefix_chars=0
    ).prompt_tokens
    assert metric_value(text, "tandem_router_absorbed_prompt_tokens_total") == estimate
    sample = parse_router_sample(text, at_s=1.0).classes["default"]
    assert (sample.absorbed_requests, sample.absorbed_prompt_tokens) == (1.0, estimate)
    endpoint = handle.router.pools["decode"].endpoints[decode.url]
    assert endpoint.absorbed_prompt_tokens == 0 and endpoint.outstanding_prompt_tokens == 0
    # With the prefill pool keeping the target again, prompts take their usual path.
    assert await stream(handle, 500)
    assert (await prefill.stats())["engine"]["prompt_tokens_total"] == 500
    assert metric_value(await handle.metrics(), "tandem_router_absorbed_requests_total") == 1


async def test_no_targets_no_verdicts_and_no_absorption(pd_router: Factory) -> None:
    handle = await pd_router(
        RouterConfig(scrape_interval_s=0.2, prefill_tokens_per_s=1.0),
        prefill=["prefill"],
        decode=["decode"],
    )
    prefill = handle.engines[0]
    handle.router.pools["prefill"].endpoints[prefill.url].outstanding_prompt_tokens = 10**6
    assert await stream(handle, 100)
    handle.router.pools["prefill"].endpoints[prefill.url].outstanding_prompt_tokens = 0
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_infeasible_total") == 0
    assert metric_value(text, "tandem_router_ttft_queueing_ratio_count") == 0
    assert metric_value(text, "tandem_router_absorbed_requests_total") == 0
    assert (await prefill.stats())["engine"]["prompt_tokens_total"] == 100


async def test_an_itl_target_below_every_request_s_pace_is_found_infeasible(
    pd_router: Factory,
) -> None:
    """The least ITL is learned from each streamed answer's mean gap between token events;
    once enough answers were seen, a 1 ms target no engine meets is infeasible."""
    fast = LatencyTargets(10.0, 90, 0.001, 90)
    handle = await pd_router(config(fast), prefill=["prefill"], decode=["decode"])
    for _ in range(MIN_TPOT_SAMPLES):
        assert await stream(handle, 20, max_tokens=5)
    least_itl = handle.router.least.least_itl_s(0.0)
    assert least_itl > 0.001
    assert metric_value(await handle.metrics(), "tandem_router_requests_infeasible_total") == 0
    assert await stream(handle, 20, max_tokens=5)
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_infeasible_total", reason="itl") == 1
    assert metric_value(text, "tandem_router_requests_infeasible_total", reason="ttft") == 0


async def test_absorbing_can_be_turned_off(pd_router: Factory) -> None:
    handle = await pd_router(
        config(prefill_tokens_per_s=25_000.0, absorb_bursts=False),
        prefill=["prefill"],
        decode=["decode"],
    )
    prefill = handle.engines[0]
    handle.router.pools["prefill"].endpoints[prefill.url].outstanding_prompt_tokens = 100_000
    assert await stream(handle, 500)
    handle.router.pools["prefill"].endpoints[prefill.url].outstanding_prompt_tokens = 0
    assert metric_value(await handle.metrics(), "tandem_router_absorbed_requests_total") == 0
    assert (await prefill.stats())["engine"]["prompt_tokens_total"] == 500
