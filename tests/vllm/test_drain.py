"""SIGTERM on a real vLLM 0.32.0 engine started with ``--shutdown-timeout``: it drains.

VLLM.md (0.34.0): with N > 0 seconds, running requests get up to N s to finish and the
engine rejects new ones meanwhile; the process exits once the engine is done. This
engine is started for this module alone, because the test ends it.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import aiohttp
import pytest

from tests.vllm.conftest import StartVllm
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(600)

SHUTDOWN_TIMEOUT_S = 30


async def test_sigterm_lets_a_running_stream_finish(start_vllm: StartVllm) -> None:
    engine = start_vllm(
        {"draining": "aggregated"}, extra=("--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S))
    )["draining"]
    body = {"model": SERVED_NAME, "prompt": "Drain me", "max_tokens": 1500, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    late = {"model": SERVED_NAME, "prompt": "late", "max_tokens": 2}
    events: list[Any] = []
    refused: tuple[int, Any] | None = None
    async with aiohttp.ClientSession() as session:
        async with session.post(engine.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                events.append(data if data == b"[DONE]" else json.loads(data))
                if len(events) == 5:
                    engine.signal(signal.SIGTERM)
                    # Half a second for the handler to run; the stream has ~3 s to go.
                    await asyncio.sleep(0.5)
                    async with session.post(engine.url + "/v1/completions", json=late) as r:
                        refused = (r.status, await r.json())
                    async with session.get(engine.url + "/health") as r:
                        assert r.status == 200, "vLLM 0.32.0 stays healthy while it drains"
        finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
        assert finishes[-1] == "length", f"the stream was cut: {events[-3:]}"
        assert events[-2]["usage"]["completion_tokens"] == 1500
        assert events[-1] == b"[DONE]"
    # A request that arrives during the drain is refused: 0.32.0 answers 500 (VLLM.md,
    # 0.34.0: "they come back aborted").
    assert refused is not None
    assert refused[0] == 500 and refused[1]["error"]["type"] == "InternalServerError", refused
    code = await asyncio.to_thread(engine.wait_exit, SHUTDOWN_TIMEOUT_S + 30.0)
    assert code == 0, engine.describe_failure(f"exit code {code} after SIGTERM")
