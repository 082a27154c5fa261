"""The engines' preStop drain command, run for real against a simulated engine.

The command is exactly what the builders put in the pod (``python3 -c DRAIN_SCRIPT``),
pointed at a ``tandem engine sim`` server on loopback instead of the pod's own port,
with a short settle time.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from typing import Any

from aiohttp.test_utils import TestClient

from tandem.api.validate import load_inference_service
from tandem.local.processes import free_port
from tandem.manifests import Owner, build_children
from tandem.manifests.drain import DRAIN_SCRIPT, SETTLE_S, build_drain_command
from tests.engine.conftest import MODEL_NAME, StartServer, state_of
from tests.factories import make_manifest
from tests.support import eventually


def command(port: int, settle_s: float, bound_s: float) -> list[str]:
    cmd = build_drain_command(port, settle_s, bound_s)
    if shutil.which(cmd[0]) is None:  # no python3 on PATH: the same script, this Python
        cmd[0] = sys.executable
    return cmd


async def stream(client: TestClient[Any, Any], max_tokens: int) -> int:
    """One streaming completion to the end; the number of chunks it carried."""
    body = {"model": MODEL_NAME, "prompt": [1] * 64, "max_tokens": max_tokens, "stream": True}
    chunks = 0
    async with client.post("/v1/completions", json=body) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: {"):
                chunks += 1
    return chunks


def running(client: TestClient[Any, Any]) -> bool:
    return bool(state_of(client).engine.stats().num_running)


async def test_drain_waits_for_the_running_stream(start_server: StartServer) -> None:
    client = await start_server("decode", speedup=1.0)
    answer = asyncio.create_task(stream(client, 300))  # ~2 s of decode at 1x
    await eventually(lambda: running(client), what="the stream to run")
    assert client.port is not None
    proc = await asyncio.create_subprocess_exec(*command(client.port, 0.1, 30))
    await asyncio.wait_for(proc.wait(), 30)
    assert answer.done(), "the drain ended while a sequence was still running"
    assert await answer == 300
    assert proc.returncode == 0


async def test_drain_gives_up_at_its_bound(start_server: StartServer) -> None:
    client = await start_server("decode", speedup=1.0)
    answer = asyncio.create_task(stream(client, 4000))  # far longer than the bound
    try:
        await eventually(lambda: running(client), what="the stream to run")
        assert client.port is not None
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(*command(client.port, 0.1, 1.0))
        await asyncio.wait_for(proc.wait(), 30)
        took = time.monotonic() - started
        assert 1.0 <= took < 6.0, took
        assert not answer.done() and running(client)
    finally:
        answer.cancel()


async def test_drain_of_an_engine_that_is_gone_ends_at_once() -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(*command(free_port(), 0, 30))
    await asyncio.wait_for(proc.wait(), 30)
    assert time.monotonic() - started < 10 and proc.returncode == 0


def test_in_flight_reads_both_spellings_and_every_series() -> None:
    namespace: dict[str, Any] = {"__name__": "drain"}
    exec(DRAIN_SCRIPT, namespace)  # defines the functions, runs nothing
    page = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="a b}c"} 2.0',
            'vllm_num_requests_running{engine="1",model_name="m"} 1.0 1700000000',
            "vllm:num_requests_waiting 3",
            'vllm:num_requests_waiting_by_reason{reason="capacity"} 5.0',
            'vllm:kv_cache_usage_perc{engine="0"} 0.5',
        ]
    )
    assert namespace["in_flight"](page) == 6.0
    assert namespace["in_flight"]("vllm:num_requests_running 0.0\n") == 0.0


def test_engine_pods_run_the_drain_within_their_grace_period() -> None:
    manifest = make_manifest(engine={"backend": "vllm", "shutdownTimeout": "45s"})
    isvc = load_inference_service(manifest)
    for child in build_children(isvc, Owner("v", "InferenceService", "chat", "uid")):
        if child["kind"] != "Deployment" or child["metadata"]["name"] == "chat-router":
            continue
        pod = child["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        hook = container["lifecycle"]["preStop"]["exec"]["command"]
        assert hook == build_drain_command(8000, SETTLE_S, 45.0)
        # preStop (settle + at most the shutdown timeout), then vLLM's drain on SIGTERM.
        assert pod["terminationGracePeriodSeconds"] >= SETTLE_S + 2 * 45
