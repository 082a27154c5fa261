"""Priority classes that require an API key, through a real router on loopback: the
header alone no longer buys a class, a class key never reaches the engines, keys rotate
without a restart. The engine here is a small recording server (it answers like vLLM's
non-streaming completions and keeps the headers it got)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tandem.router.app import build_app, start_router
from tandem.router.config import ClassConfig, RouterConfig
from tandem.router.discovery import StaticDiscovery
from tandem.router.keyfile import keep_class_keys, reload_class_keys
from tandem.router.proxy import ROUTER
from tests.router.conftest import MODEL, RouterHandle, metric_value, poll_until

pytestmark = pytest.mark.asyncio

GOLD_KEY = "gold-0123456789abcdef"
ENGINE_TOKEN = "Bearer engine-token-for-vllm-api-key"
CONFIG = RouterConfig(
    mode="aggregated",
    classes=(ClassConfig("std"), ClassConfig("gold", require_key=True)),
    default_class="std",
    scrape_interval_s=0.2,
)
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 1}


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def completions(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        await request.read()
        answer = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
                  "choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}  # fmt: skip
        return web.json_response(answer)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    await runner.cleanup()


@pytest.fixture
async def keyed_router(
    recorder: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> AsyncIterator[RouterHandle]:
    (tmp_path / "gold").write_text(f"# ops\n{GOLD_KEY}\n")
    app = build_app(CONFIG, StaticDiscovery({"pool": [recorder[0]]}), class_keys=tmp_path)
    serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=1.0)
    yield RouterHandle(serving=serving, router=app[ROUTER])
    await serving.stop()


async def post(handle: RouterHandle, headers: dict[str, str]) -> tuple[int, Any]:
    async with (
        asyncio.timeout(30),
        aiohttp.ClientSession() as session,
        session.post(handle.url + "/v1/completions", json=BODY, headers=headers) as resp,
    ):
        return resp.status, json.loads(await resp.read())


async def test_a_keyed_class_takes_a_key_and_keeps_it_from_the_engines(
    keyed_router: RouterHandle, recorder: tuple[str, list[dict[str, str]]]
) -> None:
    handle, (_, seen) = keyed_router, recorder
    header = CONFIG.priority_header
    status, body = await post(handle, {header: "gold"})
    assert status == 401 and "requires an API key" in body["error"]["message"]
    status, _ = await post(handle, {header: "gold", "Authorization": ENGINE_TOKEN})
    assert status == 401, "a token that is no class key grants nothing"
    assert not seen, "refused before any engine was asked"
    status, _ = await post(handle, {header: "gold", "Authorization": f"Bearer {GOLD_KEY}"})
    assert status == 200
    assert "Authorization" not in seen[-1], "the class key stays in the router"
    status, _ = await post(handle, {"Authorization": f"Bearer {GOLD_KEY}"})  # no header
    assert status == 200
    status, _ = await post(handle, {"Authorization": ENGINE_TOKEN})
    assert status == 200 and seen[-1]["Authorization"] == ENGINE_TOKEN  # not ours: forwarded
    text = await handle.metrics()
    assert metric_value(text, "tandem_router_requests_total", **{"class": "gold"}, code="200") == 2
    assert metric_value(text, "tandem_router_requests_total", **{"class": "std"}, code="200") == 1
    assert metric_value(text, "tandem_router_rejections_total", reason="class_key") == 2


async def test_keys_rotate_without_a_restart(keyed_router: RouterHandle, tmp_path: Path) -> None:
    handle = keyed_router
    new_key = "rotated-key-0123456789"
    task = asyncio.create_task(keep_class_keys(handle.router, tmp_path, every_s=0.05))
    try:
        replace_file(tmp_path / "gold", new_key + "\n")

        async def rotated() -> bool:
            return handle.router.class_keys.classes_of(new_key) == {"gold"}

        await poll_until(rotated, timeout_s=30)
        headers = {CONFIG.priority_header: "gold"}
        assert (await post(handle, {**headers, "Authorization": f"Bearer {GOLD_KEY}"}))[0] == 401
        assert (await post(handle, {**headers, "Authorization": f"Bearer {new_key}"}))[0] == 200
        replace_file(tmp_path / "gold", "too short\n")  # a bad edit keeps the last good keys
        assert await reload_class_keys(handle.router, tmp_path) is False
        assert handle.router.class_keys.classes_of(new_key) == {"gold"}
    finally:
        task.cancel()


def replace_file(path: Path, text: str) -> None:
    """Change a key file at once, as the kubelet updates a mounted Secret (a rename): the
    reloader running beside the test never reads it half-written (empty)."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    staged.replace(path)
