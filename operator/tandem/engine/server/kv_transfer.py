"""The P/D KV handoff between simulated engines, over real HTTP. I/O.

vLLM moves KV with NIXL (RDMA reads driven by the decode engine, coordinated over a side
channel). The simulator stands in for that with two small endpoints on the prefill
server, so a wrong or dead prefill engine fails the decode request as it would with NIXL:

- ``POST /tandem/kv/pull`` ``{"remote_request_id", "remote_engine_id", "remote_block_ids",
  "transfer_s"}``: the prefill engine keeps the blocks for ``transfer_s`` simulated seconds
  (the read), then frees them and answers 200; 404 if it holds no such request (never
  existed, already pulled, lease expired), 409 for another engine's id. With
  ``transfer_s`` 0 it is the release a decode engine sends for a request it refused or
  aborted before pulling (vLLM's NIXL notification after an empty read).
- ``POST /tandem/kv/heartbeat`` ``{"request_ids": [...]}``: restarts the leases of requests
  still queued on the decode side (NIXL's heartbeat every lease/6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp

from tandem.engine.model import KVTransferStart
from tandem.engine.server.realtime import AsyncioClock
from tandem.engine.server.runner import EngineRunner, PullFn, ReleaseFn

log = logging.getLogger(__name__)

PULL_PATH = "/tandem/kv/pull"
HEARTBEAT_PATH = "/tandem/kv/heartbeat"


def peer_url(host: str, port: int, path: str) -> str:
    """``http://host:port/path``, bracketing IPv6 literals."""
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


def remote_address(params: dict[str, Any]) -> tuple[str, int] | None:
    host, port = params.get("remote_host"), params.get("remote_port")
    if not isinstance(host, str) or not host:
        return None
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not isinstance(port, int) or isinstance(port, bool):
        return None
    return host, port


def make_pull(session: aiohttp.ClientSession, timeout_s: float) -> PullFn:
    """A pull function for the runner: True when the prefill engine handed over the KV."""

    async def pull(params: dict[str, Any], start: KVTransferStart) -> bool:
        address = remote_address(params)
        if address is None:
            return False
        url = peer_url(address[0], address[1], PULL_PATH)
        body = {
            "remote_request_id": params.get("remote_request_id"),
            "remote_engine_id": params.get("remote_engine_id"),
            "remote_block_ids": params.get("remote_block_ids"),
            "transfer_s": start.transfer_s,
        }
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with session.post(url, json=body, timeout=timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.info("KV pull from %s failed: %s", url, exc)
            return False

    return pull


def make_release(session: aiohttp.ClientSession, timeout_s: float) -> ReleaseFn:
    """A release function for the runner: frees a prefill engine's KV without reading it."""

    async def release(params: dict[str, Any]) -> None:
        address = remote_address(params)
        if address is None:
            return
        url = peer_url(address[0], address[1], PULL_PATH)
        body = {
            "remote_request_id": params.get("remote_request_id"),
            "remote_engine_id": params.get("remote_engine_id"),
            "transfer_s": 0.0,
        }
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(timeout_s)) as r:
                await r.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.info("KV release at %s failed: %s", url, exc)

    return release


async def heartbeat_loop(
    runner: EngineRunner, session: aiohttp.ClientSession, clock: AsyncioClock, lease_s: float
) -> None:
    """Decode role: every lease/6 simulated seconds, keep queued requests' KV leased."""
    interval_s = lease_s / 6.0
    while True:
        await clock.sleep(interval_s)
        by_peer: dict[tuple[str, int], list[str]] = {}
        for stream in runner.waiting_for_pull():
            assert stream.kv_params is not None
            address = remote_address(stream.kv_params)
            remote_id = stream.kv_params.get("remote_request_id")
            if address is not None and isinstance(remote_id, str):
                by_peer.setdefault(address, []).append(remote_id)
        for (host, port), ids in by_peer.items():
            url = peer_url(host, port, HEARTBEAT_PATH)
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                timeout = aiohttp.ClientTimeout(total=max(1.0, interval_s / clock.speedup))
                async with session.post(url, json={"request_ids": ids}, timeout=timeout) as r:
                    await r.read()


async def serve_pull(runner: EngineRunner, engine_id: str, body: Any) -> tuple[int, dict[str, Any]]:
    """Prefill role: hand over one request's KV. Returns (HTTP status, JSON body)."""
    if not isinstance(body, dict) or not isinstance(body.get("remote_request_id"), str):
        return 400, {"error": "remote_request_id (string) required"}
    request_id = body["remote_request_id"]
    if body.get("remote_engine_id") not in (None, engine_id):
        return 409, {"error": f"this is engine {engine_id}, not {body.get('remote_engine_id')}"}
    engine, clock = runner.engine, runner.clock
    held = engine.held_kv(request_id)
    if held is None:
        return 404, {"error": f"no KV held for request {request_id}"}
    transfer_s = body.get("transfer_s", 0.0)
    if not isinstance(transfer_s, int | float) or transfer_s < 0:
        transfer_s = 0.0
    transfer_s = min(float(transfer_s), engine.config.kv_lease_s)
    engine.extend_kv_lease(request_id, clock.now_s())
    if transfer_s > 0:
        await asyncio.sleep(transfer_s / clock.speedup)
    if not engine.release_kv(request_id):
        return 404, {"error": f"KV of request {request_id} expired during the transfer"}
    runner.wake()
    return 200, {"num_tokens": held.num_tokens, "num_blocks": held.num_blocks}


def serve_heartbeat(runner: EngineRunner, body: Any) -> tuple[int, dict[str, Any]]:
    """Prefill role: restart leases. Returns (HTTP status, JSON body)."""
    ids = body.get("request_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list):
        return 400, {"error": "request_ids (list) required"}
    now = runner.clock.now_s()
    extended = sum(
        1 for rid in ids if isinstance(rid, str) and runner.engine.extend_kv_lease(rid, now)
    )
    return 200, {"extended": extended}
