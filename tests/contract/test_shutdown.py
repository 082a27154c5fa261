"""SIGTERM with ``--shutdown-timeout 30``: the engine drains. Held against both engines;
the test ends the fleet's aggregated engine (a later test would get a new one).

VLLM.md (0.34.0): running requests get up to N s to finish, new ones are refused, the
process exits once the engine is done. 0.32.0 keeps its listener open and ``/health`` at
200 meanwhile; the simulated engine does the same.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import aiohttp
import pytest

from tests.contract.fleet import SHUTDOWN_TIMEOUT_S, Engine, Fleet
from tests.contract.http import completion_body
from tests.contract.versions import DURING_DRAIN

pytestmark = pytest.mark.timeout(600)


async def test_sigterm_lets_a_running_stream_finish(aggregated: Engine, fleet: Fleet) -> None:
    body = completion_body("Drain me", max_tokens=1500, stream=True, ignore_eos=True,
                           stream_options={"include_usage": True})  # fmt: skip
    events: list[Any] = []
    refused: tuple[int, Any] | None = None
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(aggregated.url + "/v1/completions", json=body) as resp,
        ):
            if True:
                assert resp.status == 200
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    events.append(data if data == b"[DONE]" else json.loads(data))
                    if len(events) == 5:
                        aggregated.signal(signal.SIGTERM)
                        await asyncio.sleep(0.5)  # the handler runs; the stream has seconds
                        late = completion_body("late", max_tokens=2)
                        async with session.post(aggregated.url + "/v1/completions",
                                                json=late) as r:  # fmt: skip
                            refused = (r.status, await r.json())
                        async with session.get(aggregated.url + "/health") as r:
                            assert r.status == 200, "healthy while it drains"
        finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
        assert finishes[-1] == "length", f"the stream was cut: {events[-3:]}"
        assert events[-2]["usage"]["completion_tokens"] == 1500
        assert events[-1] == b"[DONE]"
        assert refused is not None
        status, err_type = DURING_DRAIN[aggregated.version]
        assert (refused[0], refused[1]["error"]["type"]) == (status, err_type), refused
        code = await asyncio.to_thread(aggregated.wait_exit, SHUTDOWN_TIMEOUT_S + 30.0)
        assert code == 0, aggregated.log_tail()
    finally:
        fleet.retire(aggregated)
