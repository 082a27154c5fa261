"""Cluster mode against the emulated Kubernetes API: config from the InferenceService,
pools from the ready pods, both watched; then a real request through the pods' engines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI

from tandem.kube import KubeClient
from tandem.router.app import build_app, start_router
from tandem.router.config import RouterConfig
from tandem.router.discovery import KubeDiscovery
from tandem.router.proxy import ROUTER
from tandem.router.state import Router
from tests.factories import make_manifest
from tests.router.conftest import MODEL, SimEngine
from tests.support import Emulator, emulator_url, eventually, serve_emulator
from tests.support.api_client import Api

pytestmark = pytest.mark.asyncio

NS = "default"
PODS = f"/api/v1/namespaces/{NS}/pods"
ISVCS = f"/apis/serving.tandem.dev/v1alpha1/namespaces/{NS}/inferenceservices"


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


@pytest.fixture
async def api(k: Emulator) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, emulator_url(k))


def pod(name: str, role: str, engine: SimEngine) -> dict[str, Any]:
    """An engine pod whose IP and http port are those of a loopback engine."""
    port = int(engine.url.rsplit(":", 1)[1])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"serving.tandem.dev/service": "chat", "serving.tandem.dev/role": role},
        },
        "spec": {
            "containers": [
                {"name": "engine", "image": "x", "ports": [{"name": "http", "containerPort": port}]}
            ]
        },
    }


async def set_ready(api: Api, name: str, ready: bool) -> None:
    status = {
        "phase": "Running",
        "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    code, body = await api.patch(f"{PODS}/{name}/status", {"status": status})
    assert code == 200, body


def pool_urls(router: Router, role: str) -> list[str]:
    return sorted(router.pools[role].endpoints)


async def test_cluster_mode_follows_pods_and_the_inference_service(
    k: Emulator, api: Api, sims: Any, caplog: pytest.LogCaptureFixture
) -> None:
    prefill, decode = await sims("prefill"), await sims("decode")
    manifest = make_manifest("chat", NS, router={"maxInflight": 7})
    code, body = await api.create(ISVCS, manifest)
    assert code == 201, body
    for name, role, engine in (
        ("chat-prefill-0", "prefill", prefill),
        ("chat-decode-0", "decode", decode),
    ):
        code, body = await api.create(PODS, pod(name, role, engine))
        assert code == 201, body
    await set_ready(api, "chat-prefill-0", True)
    await set_ready(api, "chat-decode-0", False)  # still loading weights

    kube = KubeClient.for_url(emulator_url(k))
    discovery = KubeDiscovery(NS, "chat", base=RouterConfig(scrape_interval_s=0.2), client=kube)
    app = build_app(RouterConfig(), discovery, seed=1)
    serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=1)
    router = app[ROUTER]
    try:
        assert router.config.max_inflight == 7 and router.config.scrape_interval_s == 0.2
        assert pool_urls(router, "prefill") == [prefill.url]
        assert pool_urls(router, "decode") == []

        await set_ready(api, "chat-decode-0", True)
        await eventually(lambda: pool_urls(router, "decode") == [decode.url], what="decode pod")
        openai = AsyncOpenAI(
            base_url=f"http://127.0.0.1:{serving.port}/v1", api_key="x", max_retries=0, timeout=30
        )
        answer = await openai.completions.create(model=MODEL, prompt="hello", max_tokens=3)
        assert answer.choices[0].finish_reason == "length"
        assert (await decode.stats())["engine"]["prompt_tokens_external_total"] > 0

        code, _ = await api.patch(f"{ISVCS}/chat", {"spec": {"router": {"maxInflight": 3}}})
        assert code == 200
        await eventually(lambda: router.config.max_inflight == 3, what="config update")

        code, _ = await api.patch(f"{ISVCS}/chat", {"spec": {"router": {"maxInflight": 0}}})
        assert code == 200  # the emulator does not validate; the router keeps the last good
        await eventually(lambda: "ignoring invalid" in caplog.text, what="the invalid edit")
        assert router.config.max_inflight == 3
        code, _ = await api.patch(f"{ISVCS}/chat", {"spec": {"router": {"maxInflight": 5}}})
        await eventually(lambda: router.config.max_inflight == 5, what="the fixed edit")

        k.cut_watches(abort=True)  # the router re-lists and watches again
        code, _ = await api.delete(f"{PODS}/chat-prefill-0")
        assert code == 200
        await eventually(lambda: pool_urls(router, "prefill") == [], what="prefill removal")
        code, _ = await api.create(PODS, pod("chat-prefill-1", "prefill", prefill))
        await set_ready(api, "chat-prefill-1", True)
        await eventually(lambda: pool_urls(router, "prefill") == [prefill.url], what="new pod")
    finally:
        await serving.stop()
        await kube.close()
