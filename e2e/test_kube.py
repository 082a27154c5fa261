"""``tandem.kube`` on the real API server: apply, fetch, delete, conflicts, the scale and
status subresources, Events, Leases, list and watch, credentials and errors.

These ran against the emulator's realism layer (``tests/support``), which imitated the
API server's semantics; the real one is the judge now. What needs a fault the real
server cannot be made to give on demand (5xx, slow answers, an expired watch version,
a failing watch request) stays in ``tests/kube`` on the emulator.

The requests the client sent are read from its own ``observer``; what the API server
stored, from the server (and, for identities, its audit log).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.factories import make_manifest
from tests.support import eventually
from tests.support.listwatch import Seen

from cluster import audit
from cluster.fixtures import Cluster
from tandem.kube import (
    DEPLOYMENT,
    LAST_APPLIED_ANNOTATION,
    POD,
    KubeClient,
    KubeError,
    NotOurs,
    apply_object,
    build_event,
    create_lease,
    delete_object,
    fetch_lease,
    fetch_object,
    fetch_objects,
    fetch_scale,
    patch_scale,
    patch_status,
    post_event,
    replace_lease,
)
from tandem.kube.watch import ListWatch, Query

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "serving.tandem.dev_inferenceservices.yaml"
Sent = list[tuple[str, str, int]]


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.from_environment(
        kubeconfig=str(cluster.kubeconfig), user_agent="tandem-e2e/kube"
    )
    yield kube
    await kube.close()


def record(client: KubeClient) -> Sent:
    """What ``client`` sends from now on: (method, path, status)."""
    sent: Sent = []
    client.observer = lambda method, path, status: sent.append((method, path, status))
    return sent


def desired(namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            # Never scheduled: this is about the Deployment object, not its pods.
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"tandem.dev/none": "none"},
                    "containers": [{"name": "c", "image": "busybox:1.36"}],
                },
            },
            **spec,
        },
    }


def kubectl_patch(cluster: Cluster, namespace: str, what: str, patch: dict[str, Any]) -> None:
    cluster.run_kubectl("-n", namespace, "patch", what, "--type=merge", "-p", json.dumps(patch))


async def live(client: KubeClient, namespace: str) -> dict[str, Any]:
    obj = await fetch_object(client, DEPLOYMENT, namespace, "web")
    assert obj is not None
    return obj


# -- apply, fetch, delete ------------------------------------------------------------------


async def test_apply_creates_then_writes_nothing_when_unchanged(
    client: KubeClient, namespace: str
) -> None:
    created = await apply_object(client, desired(namespace, replicas=2))
    assert created.verb == "create"
    assert LAST_APPLIED_ANNOTATION in created.object["metadata"]["annotations"]
    sent = record(client)
    # The server defaulted a dozen fields (strategy, probes, dnsPolicy...): no drift.
    again = await apply_object(client, desired(namespace, replicas=2), created.object)
    assert again.verb == "unchanged"
    assert sent == [], "no request at all when the cached object is in sync"


async def settled(client: KubeClient, namespace: str) -> dict[str, Any]:
    """The Deployment once its controller has written its status for the current spec (it
    does so right after every change: a view taken before that is already stale)."""

    async def observed() -> dict[str, Any] | None:
        got = await live(client, namespace)
        status = got.get("status") or {}
        return got if status.get("observedGeneration") == got["metadata"]["generation"] else None

    deadline = asyncio.get_running_loop().time() + 30
    while (got := await observed()) is None:
        assert asyncio.get_running_loop().time() < deadline, "the Deployment never settled"
        await asyncio.sleep(0.2)
    return got


async def test_apply_patches_only_the_difference_with_a_precondition(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    created = await apply_object(client, desired(namespace, replicas=2, minReadySeconds=5))
    # The object as created is stale at once: the Deployment controller writes its status
    # (a patch from that view conflicts once, then is re-read; see the stale-view test).
    view = await settled(client, namespace)
    assert view["metadata"]["resourceVersion"] != created.object["metadata"]["resourceVersion"]
    sent = record(client)
    result = await apply_object(client, desired(namespace, replicas=2, minReadySeconds=9), view)
    assert result.verb == "patch" and result.changed == ("spec.minReadySeconds",)
    assert [(m, s) for m, _, s in sent] == [("PATCH", 200)]
    assert result.object["spec"]["minReadySeconds"] == 9
    # The patch carried the version it was computed from: the server took it as current.
    assert int(result.object["metadata"]["resourceVersion"]) > int(
        view["metadata"]["resourceVersion"]
    )
    (patched,) = audit.matching(
        cluster.audit_events(), verb="patch", resource="deployments", namespace=namespace,
        name="web",
    )  # fmt: skip
    assert audit.code(patched) == 200


async def test_removed_fields_vanish_from_the_live_object(
    client: KubeClient, namespace: str
) -> None:
    created = await apply_object(client, desired(namespace, replicas=2, paused=True))
    await apply_object(client, desired(namespace, replicas=2), created.object)
    assert "paused" not in (await live(client, namespace))["spec"]


async def test_replicas_are_left_to_the_autoscaler(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    created = await apply_object(client, desired(namespace), create_only={"spec": {"replicas": 3}})
    assert created.object["spec"]["replicas"] == 3
    cluster.run_kubectl("-n", namespace, "scale", "deployment/web", "--replicas=6")
    result = await apply_object(
        client,
        desired(namespace, minReadySeconds=1),
        await live(client, namespace),
        create_only={"spec": {"replicas": 3}},
    )
    assert result.verb == "patch" and result.changed == ("spec.minReadySeconds",)
    assert (await live(client, namespace))["spec"]["replicas"] == 6


async def test_a_stale_view_is_refreshed_once_and_the_write_succeeds(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    created = await apply_object(client, desired(namespace, replicas=1))
    kubectl_patch(cluster, namespace, "deployment/web", {"metadata": {"labels": {"team": "x"}}})
    sent = record(client)
    result = await apply_object(client, desired(namespace, replicas=4), created.object)
    assert result.verb == "patch"
    assert [(m, s) for m, _, s in sent] == [("PATCH", 409), ("GET", 200), ("PATCH", 200)]
    got = await live(client, namespace)
    assert got["spec"]["replicas"] == 4 and got["metadata"]["labels"]["team"] == "x"


async def test_an_object_believed_absent_but_present_is_adopted(
    client: KubeClient, namespace: str
) -> None:
    await apply_object(client, desired(namespace, replicas=1))
    sent = record(client)
    result = await apply_object(client, desired(namespace, replicas=1), None)
    assert result.verb == "unchanged"
    assert [(m, s) for m, _, s in sent] == [("POST", 409), ("GET", 200)]


async def test_an_object_we_may_not_take_over_is_left_alone(
    client: KubeClient, namespace: str
) -> None:
    await apply_object(client, desired(namespace, replicas=1))
    before = await live(client, namespace)
    sent = record(client)
    with pytest.raises(NotOurs, match="someone else's"):
        await apply_object(
            client, desired(namespace, replicas=9), None, check_owner=lambda obj: "someone else's"
        )
    # Nothing was written after the create was refused, and the object is as it was
    # (its status is the Deployment controller's, which keeps writing it meanwhile).
    assert [(m, s) for m, _, s in sent] == [("POST", 409), ("GET", 200)]
    after = await live(client, namespace)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


async def test_fetch_returns_none_for_missing_objects(client: KubeClient, namespace: str) -> None:
    assert await fetch_object(client, DEPLOYMENT, namespace, "nope") is None


async def test_fetch_objects_by_label(client: KubeClient, namespace: str) -> None:
    await apply_object(client, desired(namespace))
    other = copy.deepcopy(desired(namespace))
    other["metadata"] |= {"name": "db", "labels": {"app": "db"}}
    await apply_object(client, other)
    found = await fetch_objects(client, DEPLOYMENT, namespace, "app=db")
    assert [o["metadata"]["name"] for o in found] == ["db"]
    assert found[0]["kind"] == "Deployment"


async def test_delete_only_deletes_the_same_object(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    first = (await apply_object(client, desired(namespace))).object
    cluster.run_kubectl("-n", namespace, "delete", "deployment/web", "--wait=true")
    await apply_object(client, desired(namespace))
    with pytest.raises(KubeError) as err:
        await delete_object(client, first)
    assert err.value.conflict
    second = await live(client, namespace)
    assert await delete_object(client, second) is True
    assert await delete_object(client, first) is False


# -- subresources, Events, Leases -----------------------------------------------------------


async def test_patch_scale_sets_only_replicas(client: KubeClient, namespace: str) -> None:
    await apply_object(client, desired(namespace, replicas=1))
    sent = record(client)
    scale = await patch_scale(client, namespace, "web", 4)
    assert scale["spec"]["replicas"] == 4 and scale["kind"] == "Scale"
    ((method, path, status),) = sent
    assert (method, status) == ("PATCH", 200) and path.endswith("/deployments/web/scale")
    assert (await fetch_scale(client, namespace, "web"))["spec"]["replicas"] == 4


async def test_patch_scale_with_a_stale_version_conflicts(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    created = (await apply_object(client, desired(namespace, replicas=1))).object
    kubectl_patch(cluster, namespace, "deployment/web", {"spec": {"paused": True}})
    with pytest.raises(KubeError) as err:
        await patch_scale(
            client, namespace, "web", 3, resource_version=created["metadata"]["resourceVersion"]
        )
    assert err.value.conflict and err.value.transient
    assert (await live(client, namespace))["spec"]["replicas"] == 1


async def test_patch_scale_refuses_negative_replicas(client: KubeClient, namespace: str) -> None:
    with pytest.raises(ValueError):
        await patch_scale(client, namespace, "web", -1)


async def test_patch_status_touches_only_status(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    cluster.run_kubectl("apply", "--server-side", "-f", str(CRD), timeout_s=60)
    cluster.run_kubectl(
        "wait", "--for=condition=Established", "crd/inferenceservices.serving.tandem.dev",
        "--timeout=60s",
    )  # fmt: skip
    manifest = make_manifest("chat", namespace, backend="sim")
    created = await client.request(
        "POST",
        f"/apis/serving.tandem.dev/v1alpha1/namespaces/{namespace}/inferenceservices",
        body=manifest,
    )
    version = created["metadata"]["resourceVersion"]
    stored = await patch_status(
        client, namespace, "chat", {"routerURL": "http://x"}, resource_version=version
    )
    # The CRD's schema defaults the rest of status (conditions, pools).
    assert stored["status"]["routerURL"] == "http://x"
    assert stored["spec"] == created["spec"]
    assert stored["metadata"]["generation"] == created["metadata"]["generation"]
    with pytest.raises(KubeError) as err:
        await patch_status(client, namespace, "chat", {"routerURL": "y"}, resource_version=version)
    assert err.value.conflict
    # A write to the main resource leaves status alone.
    kubectl_patch(cluster, namespace, "tisvc/chat", {"status": {"routerURL": "z"}})
    got = await client.request(
        "GET", f"/apis/serving.tandem.dev/v1alpha1/namespaces/{namespace}/inferenceservices/chat"
    )
    assert got["status"]["routerURL"] == "http://x"


async def test_post_event_describes_the_object(client: KubeClient, namespace: str) -> None:
    obj = (await apply_object(client, desired(namespace))).object
    event = build_event(
        obj,
        type="Warning",
        reason="ApplyFailed",
        message="m" * 2000,
        component="tandem-operator",
        instance="pod-1",
    )
    await post_event(client, event)
    listed = await client.request("GET", f"/api/v1/namespaces/{namespace}/events")
    (stored,) = [e for e in listed["items"] if e["reason"] == "ApplyFailed"]
    assert stored["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert stored["type"] == "Warning" and len(stored["message"]) == 1024
    assert stored["reportingInstance"] == "pod-1"
    assert stored["metadata"]["name"].startswith("web.")


async def test_leases_are_created_fetched_and_replaced_conditionally(
    client: KubeClient, namespace: str
) -> None:
    assert await fetch_lease(client, namespace, "lock") is None
    created = await create_lease(client, namespace, "lock", {"holderIdentity": "a"})
    with pytest.raises(KubeError) as err:
        await create_lease(client, namespace, "lock", {"holderIdentity": "b"})
    assert err.value.already_exists
    replaced = await replace_lease(client, created, {"holderIdentity": "b"})
    assert replaced["spec"]["holderIdentity"] == "b"
    with pytest.raises(KubeError) as err:
        await replace_lease(client, created, {"holderIdentity": "c"})
    assert err.value.conflict
    lease = await fetch_lease(client, namespace, "lock")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"


# -- the client itself ----------------------------------------------------------------------


async def test_a_service_account_kubeconfig_is_that_identity(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    cluster.run_kubectl("-n", namespace, "create", "serviceaccount", "reader")
    path = cluster.sa_kubeconfig(namespace, "reader")
    sa = await KubeClient.from_environment(kubeconfig=str(path), user_agent="ua/1")
    try:
        info = sa.connection()
        assert info.server == cluster.apiserver_url and info.token
        with pytest.raises(KubeError) as err:
            await sa.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert err.value.status == 403 and err.value.reason == "Forbidden"
        assert not err.value.transient
    finally:
        await sa.close()
    (seen,) = audit.matching(
        cluster.audit_events(), user=f"system:serviceaccount:{namespace}:reader",
        verb="list", resource="configmaps",
    )  # fmt: skip
    assert seen["userAgent"] == "ua/1" and audit.code(seen) == 403


async def test_errors_carry_status_and_reason(client: KubeClient, namespace: str) -> None:
    with pytest.raises(KubeError) as err:
        await client.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/nope")
    assert err.value.not_found and err.value.reason == "NotFound" and not err.value.transient
    assert 'deployments.apps "nope" not found' in str(err.value)


async def test_the_observer_sees_every_answer(client: KubeClient, namespace: str) -> None:
    sent = record(client)
    await client.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")
    with pytest.raises(KubeError):
        await client.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/x")
    assert [s for _, _, s in sent] == [200, 404]


async def test_writes_name_their_field_manager(client: KubeClient, namespace: str) -> None:
    created = await client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "c"}, "data": {"k": "v"}},
    )
    # (An object with no field but its name has no managedFields entry at all.)
    managers = {m["manager"] for m in created["metadata"]["managedFields"]}
    assert managers == {"tandem-operator"}


# -- list and watch -------------------------------------------------------------------------


def pod(namespace: str, name: str, app: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "nodeSelector": {"tandem.dev/none": "none"},
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        },
    }


@contextlib.asynccontextmanager
async def following(
    client: KubeClient, namespace: str, seen: Seen, watch_timeout_s: float = 60
) -> AsyncIterator[ListWatch]:
    query = Query(POD, namespace, label_selector="app=web")
    watch = ListWatch(client, query, seen.on_list, seen.on_event, watch_timeout_s=watch_timeout_s)
    await watch.relist()
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_list_then_events_by_selector(client: KubeClient, namespace: str) -> None:
    await client.request("POST", POD.path(namespace), body=pod(namespace, "a"))
    await client.request("POST", POD.path(namespace), body=pod(namespace, "other", app="db"))
    seen = Seen()
    async with following(client, namespace, seen):
        assert seen.lists == [["a"]]
        await client.request("POST", POD.path(namespace), body=pod(namespace, "b"))
        await client.request("POST", POD.path(namespace), body=pod(namespace, "no", app="db"))
        # Pods are deleted gracefully: the watch sees the deletionTimestamp, then DELETED.
        await client.request("DELETE", POD.path(namespace, "a"), body={"gracePeriodSeconds": 0})
        await eventually(lambda: ("DELETED", "a") in seen.events, what="the delete", timeout_s=30)
    assert [e for e in seen.events if e[0] != "MODIFIED"] == [("ADDED", "b"), ("DELETED", "a")]
    assert {name for _, name in seen.events} == {"a", "b"}


async def test_a_watch_the_server_ends_is_renewed_without_a_new_list(
    cluster: Cluster, client: KubeClient, namespace: str
) -> None:
    seen = Seen()
    async with following(client, namespace, seen, watch_timeout_s=2):
        await asyncio.sleep(5)  # the server ended at least two watches meanwhile
        await client.request("POST", POD.path(namespace), body=pod(namespace, "late"))
        await eventually(lambda: ("ADDED", "late") in seen.events, what="the event", timeout_s=30)
    assert len(seen.lists) == 1
    watches = audit.matching(
        cluster.audit_events(), verb="watch", resource="pods", namespace=namespace
    )
    assert len(watches) >= 2, "the server did not end the watch"
