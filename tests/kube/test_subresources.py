"""tandem.kube scale, status, events and leases against the emulator."""

from __future__ import annotations

import pytest

from tandem.kube import (
    KubeClient,
    KubeError,
    apply_object,
    build_event,
    create_lease,
    fetch_lease,
    fetch_scale,
    patch_scale,
    patch_status,
    post_event,
    replace_lease,
)
from tests.support import Emulator

ISVC = "serving.tandem.dev/v1alpha1/inferenceservices"


async def _deployment(client: KubeClient, replicas: int = 1) -> dict[str, object]:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
    }
    return (await apply_object(client, body)).object


async def test_patch_scale_sets_only_replicas(k: Emulator, client: KubeClient) -> None:
    await _deployment(client)
    mark = k.mark()
    scale = await patch_scale(client, "default", "web", 4)
    assert scale["spec"]["replicas"] == 4 and scale["kind"] == "Scale"
    (entry,) = k.writes(mark)
    assert entry.path.endswith("/deployments/web/scale") and entry.body == {"spec": {"replicas": 4}}
    assert (await fetch_scale(client, "default", "web"))["spec"]["replicas"] == 4


async def test_patch_scale_with_a_stale_version_conflicts(k: Emulator, client: KubeClient) -> None:
    live = await _deployment(client)
    k.patch_object("apps/v1/deployments", "default", "web", {"spec": {"paused": True}})
    with pytest.raises(KubeError) as err:
        await patch_scale(
            client, "default", "web", 3, resource_version=live["metadata"]["resourceVersion"]
        )
    assert err.value.conflict and err.value.transient


async def test_patch_scale_refuses_negative_replicas(client: KubeClient) -> None:
    with pytest.raises(ValueError):
        await patch_scale(client, "default", "web", -1)


async def test_patch_status_touches_only_status(k: Emulator, client: KubeClient) -> None:
    body = {
        "apiVersion": "serving.tandem.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "default"},
        "spec": {"x": 1},
    }
    created = await client.request(
        "POST", "/apis/serving.tandem.dev/v1alpha1/namespaces/default/inferenceservices", body=body
    )
    stored = await patch_status(
        client,
        "default",
        "chat",
        {"routerURL": "http://x"},
        resource_version=created["metadata"]["resourceVersion"],
    )
    assert stored["status"] == {"routerURL": "http://x"} and stored["spec"] == {"x": 1}
    with pytest.raises(KubeError) as err:
        await patch_status(
            client,
            "default",
            "chat",
            {"routerURL": "y"},
            resource_version=created["metadata"]["resourceVersion"],
        )
    assert err.value.conflict
    assert k.fetch(ISVC, "default", "chat")["status"] == {"routerURL": "http://x"}  # type: ignore[index]


async def test_post_event_describes_the_object(k: Emulator, client: KubeClient) -> None:
    obj = await _deployment(client)
    event = build_event(
        obj,
        type="Warning",
        reason="ApplyFailed",
        message="m" * 2000,
        component="tandem-operator",
        instance="pod-1",
    )
    await post_event(client, event)
    (stored,) = k.list("v1/events", "default")
    assert stored["involvedObject"]["uid"] == obj["metadata"]["uid"]  # type: ignore[index]
    assert stored["type"] == "Warning" and len(stored["message"]) == 1024
    assert stored["reportingInstance"] == "pod-1"
    assert stored["metadata"]["name"].startswith("web.")


async def test_leases_are_created_fetched_and_replaced_conditionally(client: KubeClient) -> None:
    assert await fetch_lease(client, "default", "lock") is None
    created = await create_lease(client, "default", "lock", {"holderIdentity": "a"})
    with pytest.raises(KubeError) as err:
        await create_lease(client, "default", "lock", {"holderIdentity": "b"})
    assert err.value.already_exists
    replaced = await replace_lease(client, created, {"holderIdentity": "b"})
    assert replaced["spec"] == {"holderIdentity": "b"}
    with pytest.raises(KubeError) as err:
        await replace_lease(client, created, {"holderIdentity": "c"})
    assert err.value.conflict
    assert (await fetch_lease(client, "default", "lock"))["spec"]["holderIdentity"] == "b"  # type: ignore[index]
