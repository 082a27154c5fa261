"""Abort on client disconnect, held against both engines (the drain on SIGTERM is in
``test_shutdown.py``: it ends its engine)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.contract.fleet import Engine
from tests.contract.http import completion_body, metric_sum, metrics_of
from tests.contract.versions import CLIENT_ABORT_COUNTED

pytestmark = pytest.mark.timeout(600)


async def test_a_client_disconnect_aborts_the_request(aggregated: Engine) -> None:
    """A client that closes its stream makes the engine abort the request: it stops
    running long before its end, none of its sequences finishes by length, and no token
    is made after it stopped.

    ``n: 8`` makes the request long (8 x 2000 tokens, ~10 s on two cores) next to the
    time vLLM takes to notice a closed connection. The client closes right at its third
    event: vLLM's engine core does not wait for its API server, so a ``/metrics`` read
    there (slow on a loaded machine) let the core run on for 5,555, 8,316 and once all
    16,000 tokens before the close (3-10 tokens without it, ten tries of ten)."""
    n, max_tokens = 8, 2000
    before = await metrics_of(aggregated)
    body = completion_body("Go on", max_tokens=max_tokens, n=n, stream=True, ignore_eos=True)
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
    assert events == 3, f"the stream ended after {events} events"
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
    success = "vllm:request_success_total"
    finished = metric_sum(after, success, finished_reason="length") - metric_sum(
        before, success, finished_reason="length"
    )
    assert finished == 0, f"{finished} sequences ran to max_tokens"
    aborts = metric_sum(after, success, finished_reason="abort") - metric_sum(
        before, success, finished_reason="abort"
    )
    assert (aborts > 0) == CLIENT_ABORT_COUNTED[aggregated.version], aborts
