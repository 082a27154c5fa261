"""The P/D handoff between a prefill and a decode server over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from tandem.engine.server import create_app

from .conftest import StartServer, make_config, state_of

PROMPT = "The quick brown fox jumps over the lazy dog. " * 20  # 225 tokens
PREFILL_FIELDS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


async def prefill(client: TestClient[Any, Any], request_id: str = "req-1") -> dict[str, Any]:
    body = {"prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": PREFILL_FIELDS}
    resp = await client.post("/v1/completions", json=body, headers={"X-Request-Id": request_id})
    assert resp.status == 200
    data = await resp.json()
    assert data["choices"][0]["finish_reason"] == "length"
    params: dict[str, Any] = data["kv_transfer_params"]
    return params


def decode_body(params: dict[str, Any], stream: bool) -> dict[str, Any]:
    return {"prompt": PROMPT, "max_tokens": 6, "stream": stream, "kv_transfer_params": params}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_handoff_end_to_end(start_server: StartServer) -> None:
    p = await start_server("prefill", engine_id="engine-p")
    d = await start_server("decode")
    params = await prefill(p)
    for key in (
        "remote_engine_id",
        "remote_block_ids",
        "remote_host",
        "remote_port",
        "remote_request_id",
        "tp_size",
        "remote_num_tokens",
        "remote_blocks_expiry_time",
    ):
        assert key in params, key
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    held = params["remote_request_id"]
    # vLLM's internal id: cmpl-<X-Request-Id>-<choice>-<8 hex>
    assert params["remote_engine_id"] == "engine-p" and re.fullmatch(
        r"cmpl-req-1-0-[0-9a-f]{8}", held
    )
    assert params["remote_host"] == "127.0.0.1" and params["remote_port"] == p.server.port
    assert len(params["remote_block_ids"][0]) == 15  # ceil(225 / 16)
    assert state_of(p).engine.held_kv(held) is not None
    assert state_of(p).engine.kv_usage > 0  # blocks stay reserved until pulled

    resp = await d.post("/v1/completions", json=decode_body(params, stream=False))
    assert resp.status == 200
    data = await resp.json()
    assert (
        data["usage"]["completion_tokens"] == 6 and data["choices"][0]["finish_reason"] == "length"
    )
    assert state_of(p).engine.held_kv(held) is None and state_of(p).engine.kv_usage == 0.0
    stats = state_of(d).engine.stats()
    assert (
        stats.prompt_tokens_external_total == 224 and stats.prompt_tokens_local_compute_total == 1
    )
    text = await (await d.get("/metrics")).text()
    assert 'source="external_kv_transfer"} 224.0' in text


async def test_streaming_decode_after_prefill(start_server: StartServer) -> None:
    p = await start_server("prefill")
    d = await start_server("decode")
    params = await prefill(p, "req-s")
    resp = await d.post("/v1/completions", json=decode_body(params, stream=True))
    body = (await resp.read()).decode()
    chunks = [json.loads(b[6:]) for b in body.split("\n\n") if b.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) and body.endswith("data: [DONE]\n\n")
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_dead_prefill_fails_like_vllm(start_server: StartServer) -> None:
    p = await start_server("prefill")
    d = await start_server("decode")
    params = {**(await prefill(p)), "remote_port": free_port()}
    resp = await d.post("/v1/completions", json=decode_body(params, stream=False))
    assert resp.status == 500
    assert (await resp.json())["error"]["type"] == "InternalServerError"
    resp = await d.post("/v1/completions", json=decode_body(params, stream=True))
    assert resp.status == 200
    events = [b for b in (await resp.read()).decode().split("\n\n") if b]
    assert json.loads(events[-2][6:])["error"]["code"] == 500 and events[-1] == "data: [DONE]"
    text = await (await d.get("/metrics")).text()
    assert 'finished_reason="error",model_name="sim-model"} 2.0' in text
    assert state_of(d).engine.kv_usage == 0.0


async def test_wrong_engine_or_already_pulled_fails(start_server: StartServer) -> None:
    p = await start_server("prefill")
    d = await start_server("decode")
    params = await prefill(p)
    wrong = {**params, "remote_engine_id": "someone-else"}
    assert (await d.post("/v1/completions", json=decode_body(wrong, stream=False))).status == 500
    assert (await d.post("/v1/completions", json=decode_body(params, stream=False))).status == 200
    assert (await d.post("/v1/completions", json=decode_body(params, stream=False))).status == 500


async def test_recompute_policy_prefills_locally(start_server: StartServer) -> None:
    d = await start_server("decode", kv_load_failure_policy="recompute")
    params = {
        "do_remote_prefill": True,
        "remote_host": "127.0.0.1",
        "remote_port": free_port(),
        "remote_request_id": "gone",
        "remote_engine_id": "x",
        "remote_block_ids": [[1]],
    }
    resp = await d.post("/v1/completions", json=decode_body(params, stream=False))
    assert resp.status == 200 and (await resp.json())["usage"]["completion_tokens"] == 6
    stats = state_of(d).engine.stats()
    assert stats.kv_load_failures_total == 1 and stats.prompt_tokens_local_compute_total == 225


async def test_lease_expiry_frees_prefill_blocks(start_server: StartServer) -> None:
    p = await start_server("prefill", kv_lease_s=0.5, speedup=10.0)
    d = await start_server("decode")
    params = await prefill(p)
    state = state_of(p)
    held = params["remote_request_id"]
    for _ in range(100):
        if state.engine.held_kv(held) is None:
            break
        await asyncio.sleep(0.01)
    assert state.engine.held_kv(held) is None and state.engine.kv_usage == 0.0
    assert (await d.post("/v1/completions", json=decode_body(params, stream=False))).status == 500
    text = await (await p.get("/metrics")).text()
    assert "vllm:nixl_num_kv_expired_reqs_total" in text and 'model_name="sim-model"} 1.0' in text


async def test_heartbeat_extends_lease(start_server: StartServer) -> None:
    p = await start_server("prefill", kv_lease_s=5.0)
    held = (await prefill(p, "hb"))["remote_request_id"]
    before = state_of(p).engine.held_kv(held)
    assert before is not None
    await asyncio.sleep(0.02)
    resp = await p.post("/tandem/kv/heartbeat", json={"request_ids": [held, "unknown"]})
    assert (await resp.json()) == {"extended": 1}
    after = state_of(p).engine.held_kv(held)
    assert after is not None and after.expiry_s > before.expiry_s
    assert (await p.post("/tandem/kv/heartbeat", json={"nope": 1})).status == 400


async def test_decode_counts_transfers_as_waiting(start_server: StartServer) -> None:
    # a slow link (10 MB/s): 225 tokens x 128 KiB take 2.9 s simulated, 29 ms at 100x speed
    p = await start_server("prefill", kv_lease_s=3000.0, speedup=100.0)
    d = await start_server("decode", kv_link_bytes_per_s=1e7, speedup=100.0)
    params = await prefill(p)
    task = asyncio.ensure_future(d.post("/v1/completions", json=decode_body(params, stream=False)))
    state = state_of(d)
    for _ in range(200):
        if state.engine.stats().num_kv_transferring:
            break
        await asyncio.sleep(0.005)
    assert state.engine.num_waiting == 1 and state.engine.num_running == 0
    text = await (await d.get("/metrics")).text()
    assert (
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="sim-model",'
        'reason="deferred"} 1.0' in text
    )
    assert (
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="sim-model",'
        'reason="capacity"} 0.0' in text
    )
    assert (await task).status == 200


async def wait_released(client: TestClient[Any, Any], held: str) -> bool:
    """Whether the prefill engine behind ``client`` stops holding ``held`` within 2 s."""
    state = state_of(client)
    for _ in range(200):
        if state.engine.held_kv(held) is None:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_refused_handoff_frees_the_prefill_kv_as_vllm_does(
    start_server: StartServer,
) -> None:
    """vLLM's decode engine tells the prefill engine to free the KV of a request it
    refuses (overloaded, unknown model): it does not stay held for the whole lease."""
    p = await start_server("prefill", kv_lease_s=3000.0)
    full = await start_server("decode", max_num_queued_reqs=0)
    params = await prefill(p, "refused")
    resp = await full.post("/v1/completions", json=decode_body(params, stream=False))
    assert resp.status == 503
    assert await wait_released(p, params["remote_request_id"])
    again = await prefill(p, "unknown-model")
    body = {**decode_body(again, stream=True), "model": "no-such-model"}
    d = await start_server("decode")
    assert (await d.post("/v1/completions", json=body)).status == 404
    assert await wait_released(p, again["remote_request_id"])
    assert state_of(p).engine.kv_usage == 0.0


async def test_an_abort_before_the_pull_frees_the_prefill_kv(
    start_server: StartServer, aiohttp_client: Any
) -> None:
    p = await start_server("prefill", kv_lease_s=3000.0)
    # the CLI serves with handler cancellation, so a client that goes away aborts
    app = create_app(make_config("decode", max_num_seqs=1, speedup=1.0))
    d = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    busy = await d.post("/v1/completions", json={"prompt": "x " * 100, "max_tokens": 3000,
                                                 "stream": True})  # fmt: skip
    await busy.content.readany()  # the only sequence slot is taken
    params = await prefill(p, "queued")
    session = aiohttp.ClientSession()
    url = d.make_url("/v1/completions")
    task = asyncio.ensure_future(session.post(url, json=decode_body(params, stream=True)))
    for _ in range(200):
        if state_of(d).engine.num_waiting:
            break
        await asyncio.sleep(0.005)
    assert state_of(d).engine.num_waiting == 1 and state_of(p).engine.held_kv(
        params["remote_request_id"]
    ), "queued on the decode engine, its KV not pulled yet"
    task.cancel()  # the client goes away: its connection closes
    await session.close()
    assert await wait_released(p, params["remote_request_id"])
    busy.close()
