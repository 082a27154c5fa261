"""tandem.kube object I/O against the emulator: apply, fetch, delete, conflicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tandem.kube import (
    DEPLOYMENT,
    LAST_APPLIED_ANNOTATION,
    KubeClient,
    KubeError,
    NotOurs,
    apply_object,
    delete_object,
    fetch_object,
    fetch_objects,
)
from tests.support import Emulator

DEPLOY = "apps/v1/deployments"


def desired(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


async def test_apply_creates_then_writes_nothing_when_unchanged(
    k: Emulator, client: KubeClient
) -> None:
    created = await apply_object(client, desired(replicas=2))
    assert created.verb == "create"
    assert LAST_APPLIED_ANNOTATION in created.object["metadata"]["annotations"]
    mark = k.mark()
    again = await apply_object(client, desired(replicas=2), created.object)
    assert again.verb == "unchanged"
    assert k.log[mark:] == [], "no request at all when the cached object is in sync"


async def test_apply_patches_only_the_difference_with_a_precondition(
    k: Emulator, client: KubeClient
) -> None:
    created = await apply_object(client, desired(replicas=2, minReadySeconds=5))
    mark = k.mark()
    result = await apply_object(client, desired(replicas=2, minReadySeconds=9), created.object)
    assert result.verb == "patch" and result.changed == ("spec.minReadySeconds",)
    (entry,) = k.writes(mark)
    assert entry.method == "PATCH"
    assert entry.body["spec"] == {"minReadySeconds": 9}
    assert (
        entry.body["metadata"]["resourceVersion"] == created.object["metadata"]["resourceVersion"]
    )


async def test_removed_fields_vanish_from_the_live_object(k: Emulator, client: KubeClient) -> None:
    created = await apply_object(client, desired(replicas=2, paused=True))
    await apply_object(client, desired(replicas=2), created.object)
    assert "paused" not in k.fetch(DEPLOY, "default", "web")["spec"]  # type: ignore[index]


async def test_replicas_are_left_to_the_autoscaler(k: Emulator, client: KubeClient) -> None:
    created = await apply_object(client, desired(), create_only={"spec": {"replicas": 3}})
    assert created.object["spec"]["replicas"] == 3
    k.patch_object(DEPLOY, "default", "web", {"spec": {"replicas": 6}})
    mark = k.mark()
    live = k.fetch(DEPLOY, "default", "web")
    result = await apply_object(
        client, desired(minReadySeconds=1), live, create_only={"spec": {"replicas": 3}}
    )
    assert result.verb == "patch"
    assert "replicas" not in k.writes(mark)[0].body["spec"]
    assert k.fetch(DEPLOY, "default", "web")["spec"]["replicas"] == 6  # type: ignore[index]


async def test_a_stale_view_is_refreshed_once_and_the_write_succeeds(
    k: Emulator, client: KubeClient
) -> None:
    created = await apply_object(client, desired(replicas=1))
    k.patch_object(DEPLOY, "default", "web", {"metadata": {"labels": {"team": "x"}}})
    mark = k.mark()
    result = await apply_object(client, desired(replicas=4), created.object)
    assert result.verb == "patch"
    assert [(e.method, e.status) for e in k.log[mark:]] == [
        ("PATCH", 409),
        ("GET", 200),
        ("PATCH", 200),
    ]
    live = k.fetch(DEPLOY, "default", "web")
    assert live["spec"]["replicas"] == 4 and live["metadata"]["labels"]["team"] == "x"  # type: ignore[index]


async def test_an_object_believed_absent_but_present_is_adopted(
    k: Emulator, client: KubeClient
) -> None:
    await apply_object(client, desired(replicas=1))
    mark = k.mark()
    result = await apply_object(client, desired(replicas=1), None)
    assert result.verb == "unchanged"
    assert [(e.method, e.status) for e in k.log[mark:]] == [("POST", 409), ("GET", 200)]


async def test_an_object_we_may_not_take_over_is_left_alone(
    k: Emulator, client: KubeClient
) -> None:
    await apply_object(client, desired(replicas=1))
    before = k.fetch(DEPLOY, "default", "web")
    with pytest.raises(NotOurs, match="someone else's"):
        await apply_object(
            client, desired(replicas=9), None, check_owner=lambda obj: "someone else's"
        )
    assert k.fetch(DEPLOY, "default", "web") == before


async def test_fetch_returns_none_for_missing_objects(client: KubeClient) -> None:
    assert await fetch_object(client, DEPLOYMENT, "default", "nope") is None


async def test_fetch_objects_by_label(client: KubeClient) -> None:
    await apply_object(client, desired())
    other = copy.deepcopy(desired())
    other["metadata"] |= {"name": "db", "labels": {"app": "db"}}
    await apply_object(client, other)
    found = await fetch_objects(client, DEPLOYMENT, "default", "app=db")
    assert [o["metadata"]["name"] for o in found] == ["db"]
    assert found[0]["kind"] == "Deployment"


async def test_delete_only_deletes_the_same_object(k: Emulator, client: KubeClient) -> None:
    first = (await apply_object(client, desired())).object
    k.delete_object(DEPLOY, "default", "web")
    await apply_object(client, desired())
    with pytest.raises(KubeError) as err:
        await delete_object(client, first)
    assert err.value.conflict
    assert k.fetch(DEPLOY, "default", "web") is not None
    assert await delete_object(client, k.fetch(DEPLOY, "default", "web")) is True  # type: ignore[arg-type]
    assert await delete_object(client, first) is False
