"""The operator's restrictions: what a spec's author may not ask for is refused on the
resource, and nothing is built or queried for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from tandem.control.restrictions import Restrictions
from tests.factories import make_manifest
from tests.operator.helpers import children, condition, create, isvc, patch_spec
from tests.support import Emulator, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import settle

POLICY = Restrictions(
    image_prefixes=("vllm/vllm-openai:", "ghcr.io/tandem-serving/"),
    secrets="prefixed",
    prometheus_urls=("http://prometheus.monitoring:9090",),
)


async def _refused(k: Emulator, name: str) -> dict[str, Any]:
    ready = await eventually(
        lambda: (c := condition(isvc(k, name), "Ready")) and c["reason"] == "PolicyViolation" and c,
        what=f"{name} refused",
    )
    assert ready["status"] == "False"
    return dict(ready)


async def test_an_image_from_elsewhere_and_any_secret_are_refused_and_nothing_is_built(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await operators(restrictions=POLICY)
    await create(
        api,
        make_manifest(
            "evil",
            engine={"backend": "vllm", "image": "attacker.example/miner:1"},
            model={"name": "m", "uri": "s3://bucket-a/m", "secretRef": {"name": "cloud-admin"}},
        ),
    )
    await create(api, make_manifest("fine"))
    ready = await _refused(k, "evil")
    assert "spec.engine.image" in ready["message"] and "vllm/vllm-openai:" in ready["message"]
    assert "spec.model.secretRef.name" in ready["message"] and "tandem-model-*" in ready["message"]
    await eventually(lambda: len(children(k, service="fine")) == 14, what="the neighbour")
    await settle(op, k)
    assert children(k, service="evil") == {}
    events = [e for e in k.list("v1/events") if e["reason"] == "PolicyViolation"]
    assert len(events) == 1 and events[0]["involvedObject"]["name"] == "evil"


async def test_a_running_service_changed_to_a_refused_image_keeps_what_it_runs(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await operators(restrictions=POLICY)
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k, service="chat")) == 14)
    before = children(k, service="chat")[("Deployment", "chat-decode")]
    await patch_spec(api, "chat", {"engine": {"image": "attacker.example/x:1"}})
    await _refused(k, "chat")
    await settle(op, k)
    after = children(k, service="chat")[("Deployment", "chat-decode")]
    assert after["spec"]["template"] == before["spec"]["template"]


async def test_a_metrics_url_the_operator_does_not_allow_is_never_queried(
    k: Emulator, api: Api, operators: Callable[..., Any], aiohttp_server: Any
) -> None:
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(f"{request.method} {request.path}")
        return web.json_response({"status": "error", "errorType": "bad_data"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    server = await aiohttp_server(app)
    op = await operators(autoscaler=True, restrictions=POLICY)
    manifest = make_manifest("chat", autoscaling={"interval": "1s"})
    manifest["spec"]["autoscaling"]["metrics"] = {
        "source": "prometheus",
        "url": f"http://127.0.0.1:{server.port}/latest/meta-data",
    }
    await create(api, manifest)
    ready = await _refused(k, "chat")
    assert "spec.autoscaling.metrics.url" in ready["message"]
    assert "http://prometheus.monitoring:9090" in ready["message"]
    await settle(op, k, quiet_s=2.0)
    assert hits == []
    assert condition(isvc(k, "chat"), "MetricsAvailable") is None


async def test_a_local_model_folder_is_refused_whatever_the_policy(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    """``file://`` is for ``tandem up``: no pod has the folder. The message names the field
    and the volume that would provide it."""
    op = await operators()  # the default restrictions allow anything else
    await create(
        api, make_manifest("laptop", model={"name": "m", "uri": "file:///home/me/tiny-llama"})
    )
    ready = await _refused(k, "laptop")
    assert "spec.model.uri" in ready["message"] and "tandem up" in ready["message"]
    assert "pvc://CLAIM/PATH" in ready["message"]
    await settle(op, k)
    assert children(k, service="laptop") == {}
