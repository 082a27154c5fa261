"""Updating, resyncing, switching mode and deleting an InferenceService."""

from __future__ import annotations

import logging

import pytest

from tests.factories import make_manifest
from tests.operator.helpers import (
    DEPLOY,
    ISVCS,
    child_writes,
    children,
    condition,
    create,
    disaggregated_children,
    isvc,
    patch_spec,
    resync,
    writes_by,
)
from tests.support import Emulator, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle

STATUS = "PATCH /apis/serving.tandem.dev/v1alpha1/namespaces/default/inferenceservices/chat/status"


def _deployment(name: str) -> str:
    return f"PATCH /apis/apps/v1/namespaces/default/deployments/{name}"


async def _ready(k: Emulator, api: Api, op: RunningOperator, **spec: object) -> None:
    await create(api, make_manifest("chat", **spec))
    await eventually(lambda: len(children(k)) == 14 and isvc(k, "chat").get("status"))
    await settle(op, k)


@pytest.mark.parametrize(
    ("change", "patched"),
    [
        ({"prefill": {"tensorParallelSize": 2, "gpu": {"count": 2}}}, ["chat-prefill"]),
        ({"engine": {"image": "registry.example/vllm:custom"}}, ["chat-decode", "chat-prefill"]),
        ({"decode": {"memory": "48Gi"}}, ["chat-decode"]),
        ({"router": {"cpu": "2"}}, ["chat-router"]),
    ],
    ids=["tp-size", "image", "limits", "router"],
)
async def test_update_patches_exactly_the_affected_children(
    k: Emulator, api: Api, op: RunningOperator, change: dict[str, object], patched: list[str]
) -> None:
    await _ready(k, api, op)
    mark = k.mark()
    await patch_spec(api, "chat", change)
    await eventually(lambda: isvc(k, "chat")["status"]["observedGeneration"] == 2)
    await settle(op, k)
    assert sorted(child_writes(k, op, mark)) == sorted(
        [*(_deployment(name) for name in patched), STATUS]
    )


async def test_update_posts_an_event_naming_the_changed_fields(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    await patch_spec(api, "chat", {"decode": {"memory": "48Gi"}})
    await eventually(lambda: any(e["reason"] == "Updated" for e in k.list("v1/events")))
    await settle(op, k)
    updated = [e["message"] for e in k.list("v1/events") if e["reason"] == "Updated"]
    assert updated == ["Updated Deployment chat-decode: spec.template.metadata, spec.template.spec"]


async def test_a_second_reconcile_of_an_unchanged_service_writes_nothing(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    mark = k.mark()
    resync(op)
    await settle(op, k)
    k.cut_watches()  # Kopf re-lists and re-watches: every object is seen again
    await eventually(lambda: k.open_watches("deployments"))
    resync(op)
    await settle(op, k)
    assert writes_by(k, op, mark) == []


async def test_fields_removed_from_the_spec_vanish_from_children(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(
        k, api, op, prefill={"replicas": {"min": 1, "max": 4}, "nodeSelector": {"gpu": "h100"}}
    )
    spec = k.fetch(DEPLOY, "default", "chat-prefill")["spec"]["template"]["spec"]  # type: ignore[index]
    assert spec["nodeSelector"] == {"gpu": "h100"}
    status, _ = await api.patch(
        f"{ISVCS.format(ns='default')}/chat", {"spec": {"prefill": {"nodeSelector": None}}}
    )
    assert status == 200
    await eventually(
        lambda: (
            "nodeSelector"
            not in k.fetch(  # type: ignore[index]
                DEPLOY, "default", "chat-prefill"
            )["spec"]["template"]["spec"]
        ),
        what="nodeSelector to be removed",
    )


async def test_mode_switch_deletes_the_stale_children(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    status, _ = await api.patch(
        f"{ISVCS.format(ns='default')}/chat",
        {
            "spec": {
                "mode": "aggregated",
                "prefill": None,
                "decode": None,
                "pool": {"replicas": {"min": 1, "max": 4}},
            }
        },
    )
    assert status == 200
    await eventually(
        lambda: (
            ("Deployment", "chat-pool") in children(k)
            and ("Deployment", "chat-prefill") not in children(k)
        )
    )
    await settle(op, k)
    names = set(children(k))
    assert (
        not {
            ("Deployment", "chat-prefill"),
            ("Deployment", "chat-decode"),
            ("Service", "chat-prefill"),
            ("Service", "chat-decode"),
            ("PodDisruptionBudget", "chat-prefill"),
            ("PodDisruptionBudget", "chat-decode"),
        }
        & names
    )
    assert {
        ("Deployment", "chat-pool"),
        ("Service", "chat-pool"),
        ("PodDisruptionBudget", "chat-pool"),
    } <= names
    body = isvc(k, "chat")
    assert {c["type"] for c in body["status"]["conditions"]} == {
        "Ready",
        "PoolReady",
        "RouterReady",
    }
    assert set(body["status"]["pools"]) == {"pool"}
    deleted = {e["message"] for e in k.list("v1/events") if e["reason"] == "Deleted"}
    assert "Deleted Deployment chat-prefill: no longer part of the desired state" in deleted


async def test_conditions_of_other_writers_survive_reconciles(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    scaling = {
        "type": "ScalingActive",
        "status": "True",
        "reason": "WithinBounds",
        "message": "autoscaler",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    conditions = [*isvc(k, "chat")["status"]["conditions"], scaling]
    k.patch_object(
        "serving.tandem.dev/v1alpha1/inferenceservices",
        "default",
        "chat",
        {"status": {"conditions": conditions}},
        subresource="status",
    )
    await patch_spec(api, "chat", {"decode": {"memory": "48Gi"}})
    await eventually(lambda: isvc(k, "chat")["status"]["observedGeneration"] == 2)
    await settle(op, k)
    assert condition(isvc(k, "chat"), "ScalingActive") == scaling


async def test_delete_makes_no_errors_and_leaves_only_collectable_children(
    k: Emulator, api: Api, op: RunningOperator, caplog: pytest.LogCaptureFixture
) -> None:
    await _ready(k, api, op)
    uid = isvc(k, "chat")["metadata"]["uid"]
    caplog.set_level(logging.WARNING)
    mark = k.mark()
    status, _ = await api.delete(f"{ISVCS.format(ns='default')}/chat")
    assert status == 200
    await eventually(lambda: op.runtime is not None and not list(op.runtime.services))
    await settle(op, k)
    assert writes_by(k, op, mark) == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # Garbage collection is the API server's (not emulated; see e2e/): every child left
    # must carry the controller reference it needs to be collected.
    left = children(k)
    assert set(left) == disaggregated_children("chat")
    for obj in left.values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["controller"] and ref["blockOwnerDeletion"]
