"""The baseline of ``bench/router.py``: vLLM's toy P/D proxy pattern, written again here.

vLLM's NIXL examples put a small FastAPI proxy in front of prefill and decode engines
(``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``); llm-d's sidecar and
several tutorials copy its pattern. This is that pattern, so Tandem's router can be
measured against it on the same engines: FastAPI on uvicorn, one ``httpx.AsyncClient`` per
engine without limits or timeouts, engines taken round-robin, and for each request

1. the prefill leg: the body with ``stream: false``, ``max_tokens: 1`` (and
   ``max_completion_tokens: 1`` when present), no ``stream_options``, ``min_tokens`` or
   ``min_completion_tokens``, and ``kv_transfer_params`` asking for remote decode; the
   answer read whole and its ``kv_transfer_params`` taken;
2. the decode leg: the original body with those parameters, streamed back as it comes.

No retries, no health, no limits: what the pattern does, nothing more.

Usage: ``python bench/toy_proxy.py --port P --prefill URL,URL --decode URL,URL`` (needs the
``bench`` extra: ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

try:
    import httpx
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse
except ImportError as err:  # pragma: no cover - the message is the point
    raise SystemExit(
        f"bench/toy_proxy.py needs FastAPI, httpx and uvicorn ({err.name} is missing): "
        "pip install -e '.[bench]'"
    ) from None

REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def build_proxy(prefill: list[str], decode: list[str]) -> FastAPI:
    clients: dict[str, list[httpx.AsyncClient]] = {}
    turns: dict[str, Iterator[int]] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        for role, urls in (("prefill", prefill), ("decode", decode)):
            clients[role] = [
                httpx.AsyncClient(base_url=url + "/v1", timeout=None, limits=limits) for url in urls
            ]
            turns[role] = itertools.cycle(range(len(urls)))
        yield
        for pool in clients.values():
            for client in pool:
                await client.aclose()

    app = FastAPI(lifespan=lifespan)

    def next_client(role: str) -> httpx.AsyncClient:
        return clients[role][next(turns[role])]

    async def relay(path: str, request: Request) -> StreamingResponse:
        body: dict[str, Any] = await request.json()
        request_id = str(uuid.uuid4())
        headers = {"X-Request-Id": request_id}
        first = {**body, "kv_transfer_params": REMOTE_DECODE, "stream": False, "max_tokens": 1}
        if "max_completion_tokens" in first:
            first["max_completion_tokens"] = 1
        for name in ("stream_options", "min_tokens", "min_completion_tokens"):
            first.pop(name, None)
        answer = await next_client("prefill").post(path, json=first, headers=headers)
        answer.raise_for_status()
        params = answer.json().get("kv_transfer_params")
        if params:
            body["kv_transfer_params"] = params
        decoder = next_client("decode")

        async def stream() -> AsyncIterator[bytes]:
            async with decoder.stream("POST", path, json=body, headers=headers) as resp:
                resp.raise_for_status()
                async for chunk in resp.aiter_bytes():
                    yield chunk

        return StreamingResponse(stream(), media_type="application/json")

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        return await relay("/completions", request)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        return await relay("/chat/completions", request)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prefill", required=True, help="URL[,URL...]")
    p.add_argument("--decode", required=True, help="URL[,URL...]")
    p.add_argument(
        "--log-level",
        default="info",
        help="uvicorn's (info, its default and the toy proxy's: an access-log line a request)",
    )
    args = p.parse_args()
    app = build_proxy(args.prefill.split(","), args.decode.split(","))
    # uvicorn's defaults, as vLLM's toy proxy runs it (uvloop and httptools when installed)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
