"""Status from the children's own status (pure)."""

from __future__ import annotations

from typing import Any

from tandem.api.validate import load_inference_service
from tandem.control.readiness import (
    compute_component,
    compute_invalid_status,
    compute_status,
    compute_status_patch,
)
from tests.factories import make_manifest

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def deployment(
    *,
    ready: int = 1,
    replicas: int = 1,
    generation: int = 1,
    observed: int | None = 1,
    available: str = "True",
    reason: str = "MinimumReplicasAvailable",
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "replicas": replicas,
        "readyReplicas": ready,
        "conditions": [
            {"type": "Available", "status": available, "reason": reason, "message": "m"}
        ],
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": status,
    }


def all_ready(name: str = "chat") -> dict[str, dict[str, Any]]:
    return {f"{name}-{role}": deployment() for role in ("prefill", "decode", "router")}


ISVC = load_inference_service(make_manifest("chat"))


def test_a_missing_deployment_is_not_ready() -> None:
    cond = compute_component("prefill", "chat-prefill", None)
    assert (cond.type, cond.status, cond.reason) == ("PrefillReady", "False", "DeploymentMissing")


def test_an_unobserved_generation_is_a_pending_rollout() -> None:
    cond = compute_component("decode", "chat-decode", deployment(generation=2, observed=1))
    assert (cond.status, cond.reason) == ("False", "RolloutPending")


def test_an_available_deployment_with_ready_pods_is_ready() -> None:
    cond = compute_component("router", "chat-router", deployment(ready=2, replicas=2))
    assert (cond.type, cond.status, cond.reason) == ("RouterReady", "True", "DeploymentAvailable")
    assert cond.message == "2/2 replicas of Deployment chat-router ready"


def test_an_unavailable_deployment_carries_its_reason_and_message() -> None:
    cond = compute_component(
        "prefill",
        "chat-prefill",
        deployment(ready=0, replicas=3, available="False", reason="MinimumReplicasUnavailable"),
    )
    assert (cond.status, cond.reason) == ("False", "MinimumReplicasUnavailable")
    assert cond.message == "0/3 replicas of Deployment chat-prefill ready: m"


def test_zero_replicas_is_not_ready() -> None:
    cond = compute_component("prefill", "p", deployment(ready=0, replicas=0))
    assert cond.reason == "ScaledToZero"


def test_ready_rolls_up_the_components() -> None:
    status = compute_status(ISVC, all_ready())
    assert [c.type for c in status.conditions] == [
        "Ready",
        "PrefillReady",
        "DecodeReady",
        "RouterReady",
    ]
    assert status.conditions[0].status == "True"
    assert status.router_url == "http://chat.default.svc:8000/v1"
    assert status.pools == {
        "prefill": {"replicas": 1, "readyReplicas": 1},
        "decode": {"replicas": 1, "readyReplicas": 1},
    }


def test_ready_names_the_first_component_that_is_not() -> None:
    children = all_ready()
    children["chat-decode"] = deployment(ready=0, available="False")
    ready = compute_status(ISVC, children).conditions[0]
    assert (ready.status, ready.reason) == ("False", "DecodeNotReady")
    assert "chat-decode" in ready.message and "chat-prefill" not in ready.message


def test_a_reconcile_error_overrides_ready() -> None:
    ready = compute_status(ISVC, all_ready(), error="Service chat exists").conditions[0]
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "ReconcileError",
        "Service chat exists",
    )


def test_aggregated_mode_reports_the_pool() -> None:
    isvc = load_inference_service(make_manifest("solo", mode="aggregated"))
    status = compute_status(isvc, {})
    assert [c.type for c in status.conditions] == ["Ready", "PoolReady", "RouterReady"]
    assert set(status.pools or {}) == {"pool"}


def test_the_first_patch_sets_everything() -> None:
    patch = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=3, now=NOW)
    assert patch is not None
    assert patch["observedGeneration"] == 3
    assert all(
        c["lastTransitionTime"] == NOW and c["observedGeneration"] == 3 for c in patch["conditions"]
    )


def test_an_unchanged_status_needs_no_patch() -> None:
    desired = compute_status(ISVC, all_ready())
    live = compute_status_patch(None, desired, generation=1, now=NOW)
    assert compute_status_patch(live, desired, generation=1, now=LATER) is None


def test_transition_time_moves_only_when_the_status_flips() -> None:
    live = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=1, now=NOW)
    children = all_ready()
    children["chat-router"] = deployment(ready=2, replicas=2)
    patch = compute_status_patch(live, compute_status(ISVC, children), generation=1, now=LATER)
    assert patch is not None
    times = {c["type"]: c["lastTransitionTime"] for c in patch["conditions"]}
    assert times == {"Ready": NOW, "PrefillReady": NOW, "DecodeReady": NOW, "RouterReady": NOW}
    children["chat-router"] = deployment(ready=0, available="False")
    patch = compute_status_patch(live, compute_status(ISVC, children), generation=1, now=LATER)
    assert patch is not None
    times = {c["type"]: c["lastTransitionTime"] for c in patch["conditions"]}
    assert times["RouterReady"] == LATER and times["Ready"] == LATER
    assert times["PrefillReady"] == NOW


def test_other_writers_conditions_are_kept_in_place() -> None:
    scaling = {"type": "ScalingActive", "status": "True", "reason": "R", "message": ""}
    live = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=1, now=NOW)
    assert live is not None
    live["conditions"].insert(1, scaling)
    children = all_ready()
    children["chat-prefill"] = None  # type: ignore[assignment]
    patch = compute_status_patch(
        live,
        compute_status(ISVC, {k: v for k, v in children.items() if v}),
        generation=1,
        now=LATER,
    )
    assert patch is not None and patch["conditions"][1] == scaling


def test_conditions_and_pools_of_a_previous_mode_are_removed() -> None:
    live = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=1, now=NOW)
    live["pools"]["prefill"]["desiredReplicas"] = 4  # type: ignore[index]
    solo = load_inference_service(make_manifest("chat", mode="aggregated"))
    patch = compute_status_patch(live, compute_status(solo, {}), generation=2, now=LATER)
    assert patch is not None
    assert {c["type"] for c in patch["conditions"]} == {"Ready", "PoolReady", "RouterReady"}
    assert patch["pools"] == {
        "pool": {"replicas": 0, "readyReplicas": 0},
        "prefill": None,
        "decode": None,
    }


def test_pool_fields_of_the_autoscaler_are_not_touched() -> None:
    live = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=1, now=NOW)
    live["pools"]["prefill"]["desiredReplicas"] = 4  # type: ignore[index]
    children = all_ready()
    children["chat-prefill"] = deployment(ready=2, replicas=2)
    patch = compute_status_patch(live, compute_status(ISVC, children), generation=1, now=NOW)
    assert patch is not None and patch["pools"] == {"prefill": {"replicas": 2, "readyReplicas": 2}}


def test_an_invalid_spec_only_changes_ready() -> None:
    live = compute_status_patch(None, compute_status(ISVC, all_ready()), generation=1, now=NOW)
    patch = compute_status_patch(
        live, compute_invalid_status("spec.x: bad"), generation=2, now=LATER
    )
    assert patch is not None and "pools" not in patch and "routerURL" not in patch
    ready, *others = patch["conditions"]
    assert (ready["type"], ready["reason"], ready["message"]) == (
        "Ready",
        "InvalidSpec",
        "spec.x: bad",
    )
    assert [c["type"] for c in others] == ["PrefillReady", "DecodeReady", "RouterReady"]
    assert patch["observedGeneration"] == 2
