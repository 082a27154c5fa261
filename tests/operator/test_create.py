"""Creating an InferenceService: children, ownership, status, events, metrics."""

from __future__ import annotations

from tests.factories import make_manifest
from tests.operator.helpers import (
    DEPLOY,
    children,
    condition,
    create,
    disaggregated_children,
    isvc,
    make_available,
)
from tests.support import Emulator, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle


async def test_create_makes_every_child_owned_and_labelled(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    owner = await create(api, make_manifest("chat"))
    expected = disaggregated_children("chat")
    found = await eventually(
        lambda: expected <= set(children(k)) and children(k), what="every child"
    )
    assert set(found) == expected
    for (kind, name), obj in found.items():
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "serving.tandem.dev/v1alpha1",
                "kind": "InferenceService",
                "name": "chat",
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], (kind, name)
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "tandem"
        assert labels["app.kubernetes.io/instance"] == "chat"
        assert labels["serving.tandem.dev/service"] == "chat"
    roles = {
        n: o["metadata"]["labels"]["serving.tandem.dev/role"]
        for (kind, n), o in found.items()
        if kind == "Deployment"
    }
    assert roles == {"chat-prefill": "prefill", "chat-decode": "decode", "chat-router": "router"}


async def test_autoscaled_pools_start_at_their_initial_size(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    manifest = make_manifest("chat")
    manifest["spec"]["prefill"]["replicas"] = {"min": 1, "max": 8, "initial": 3}
    await create(api, manifest)
    prefill = await eventually(lambda: k.fetch(DEPLOY, "default", "chat-prefill"))
    assert prefill["spec"]["replicas"] == 3


async def test_create_sets_conditions_pools_url_and_observed_generation(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("chat"))
    body = await eventually(lambda: condition(isvc(k, "chat"), "Ready") and isvc(k, "chat"))
    status = body["status"]
    assert status["observedGeneration"] == 1
    assert status["routerURL"] == "http://chat.default.svc:8000/v1"
    assert {c["type"] for c in status["conditions"]} == {
        "Ready",
        "PrefillReady",
        "DecodeReady",
        "RouterReady",
    }
    ready = condition(body, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "PrefillNotReady" and "chat-prefill" in ready["message"]
    assert ready["lastTransitionTime"] and ready["observedGeneration"] == 1
    assert status["pools"] == {
        "prefill": {"replicas": 0, "readyReplicas": 0},
        "decode": {"replicas": 0, "readyReplicas": 0},
    }


async def test_service_is_ready_once_its_deployments_are_available(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("chat"))
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-router"), what="the router")
    make_available(k, "chat-prefill")
    make_available(k, "chat-decode")
    prefill = await eventually(
        lambda: (c := condition(isvc(k, "chat"), "PrefillReady")) and c["status"] == "True" and c
    )
    assert prefill["reason"] == "DeploymentAvailable"
    # The two Deployments' events may land in separate reconciles: wait for both.
    await eventually(
        lambda: (c := condition(isvc(k, "chat"), "DecodeReady")) and c["status"] == "True",
        what="DecodeReady",
    )
    assert condition(isvc(k, "chat"), "Ready")["reason"] == "RouterNotReady"  # type: ignore[index]
    make_available(k, "chat-router")
    ready = await eventually(
        lambda: (c := condition(isvc(k, "chat"), "Ready")) and c["status"] == "True" and c
    )
    assert ready["reason"] == "AllComponentsReady"
    assert isvc(k, "chat")["status"]["pools"]["prefill"] == {"replicas": 1, "readyReplicas": 1}


async def test_unavailable_deployment_reports_its_reason(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("chat"))
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"))
    make_available(k, "chat-decode", ready=0)
    decode = await eventually(
        lambda: (
            (c := condition(isvc(k, "chat"), "DecodeReady"))
            and c["reason"] == "MinimumReplicasUnavailable"
            and c
        )
    )
    assert decode["status"] == "False"
    assert "0/1 replicas of Deployment chat-decode ready" in decode["message"]


async def test_create_posts_an_event_for_every_child(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    owner = await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14)
    await settle(op, k)
    events = [
        e
        for e in k.list("v1/events", "default")
        if e["involvedObject"]["uid"] == owner["metadata"]["uid"]
    ]
    created = sorted(e["message"] for e in events if e["reason"] == "Created")
    assert created == sorted(
        f"Created {kind} {name}" for kind, name in disaggregated_children("chat")
    )
    assert all(
        e["type"] == "Normal"
        and e["source"]["component"] == "tandem-operator"
        and e["involvedObject"]["kind"] == "InferenceService"
        for e in events
    )


async def test_aggregated_mode_runs_one_pool(k: Emulator, api: Api, op: RunningOperator) -> None:
    await create(api, make_manifest("solo", mode="aggregated"))
    # Children are applied concurrently: wait for the router too, then check nothing else.
    found = await eventually(
        lambda: (
            {("Deployment", "solo-pool"), ("Deployment", "solo-router")} <= set(children(k))
            and children(k)
        )
    )
    assert {n for kind, n in found if kind == "Deployment"} == {"solo-pool", "solo-router"}
    body = await eventually(lambda: condition(isvc(k, "solo"), "PoolReady") and isvc(k, "solo"))
    assert {c["type"] for c in body["status"]["conditions"]} == {
        "Ready",
        "PoolReady",
        "RouterReady",
    }
    assert set(body["status"]["pools"]) == {"pool"}


async def test_monitors_are_created_when_asked_for(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(
        api, make_manifest("chat", monitoring={"serviceMonitor": True, "podMonitor": True})
    )
    found = await eventually(lambda: len(children(k)) == 16 and children(k))
    assert ("PodMonitor", "chat-engines") in found
    assert ("ServiceMonitor", "chat-router") in found


async def test_services_in_other_namespaces_are_served(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("chat", namespace="team-a"))
    await eventually(lambda: len(children(k, "team-a")) == 14)
    assert children(k, "default") == {}
