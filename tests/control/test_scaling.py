"""What the autoscaler's shell reads and writes: targets, costs, status patch, labels."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.api.validate import load_inference_service
from tandem.control.readiness import compute_status, compute_status_patch
from tandem.control.scaling import (
    REASON_LABELS,
    Written,
    compute_autoscaler_status_patch,
    compute_cost_annotations,
    compute_live_replicas,
    compute_pool_targets,
    compute_reason_label,
    compute_router_targets,
)
from tandem.control.tick import Tick, compute_tick
from tandem.policy import PolicyState, decide
from tandem.policy.types import CAUSES, DRIVERS, PoolDecision
from tests.factories import make_manifest
from tests.policy.factories import decode_load, make_config, make_obs, make_pool, prefill_load

COST = "controller.kubernetes.io/pod-deletion-cost"


def pod(
    name: str,
    role: str = "decode",
    *,
    service: str = "chat",
    ip: str | None = "10.0.0.7",
    ready: bool = True,
    port: int | None = 8000,
    deleting: bool = False,
    cost: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"serving.tandem.dev/service": service, "serving.tandem.dev/role": role},
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    if cost is not None:
        meta["annotations"] = {COST: cost}
    ports = [{"name": "http", "containerPort": port}] if port is not None else []
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"containers": [{"ports": ports}]}, "status": status}


def deployment(name: str, replicas: int | None, rv: str = "10") -> dict[str, Any]:
    spec = {} if replicas is None else {"replicas": replicas}
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": spec}


def isvc() -> Any:
    return load_inference_service(make_manifest("chat"))


def test_targets_are_the_deployment_size_and_the_ready_pods() -> None:
    deployments = {
        "chat-prefill": deployment("chat-prefill", 2),
        "chat-decode": deployment("chat-decode", 3),
    }
    pods = [
        pod("p-0", "prefill", ip="10.0.0.1"),
        pod("p-1", "prefill", ready=False),
        pod("d-0", ip="fd00::9", port=9000),
        pod("d-1", deleting=True),
        pod("d-2", ip=None),
        pod("d-3", service="other"),
        pod("r-0", "router", ip="10.0.0.3"),
    ]
    targets = compute_pool_targets(isvc(), deployments, pods)
    assert targets is not None
    assert targets["prefill"].replicas == 2 and targets["prefill"].ready == 1
    assert dict(targets["prefill"].pods) == {"p-0": "http://10.0.0.1:8000/metrics"}
    assert targets["decode"].replicas == 3
    assert dict(targets["decode"].pods) == {"d-0": "http://[fd00::9]:9000/metrics"}
    assert compute_router_targets(isvc(), pods) == {"r-0": "http://10.0.0.3:8000/metrics"}


def test_no_targets_until_every_pool_deployment_exists() -> None:
    assert compute_pool_targets(isvc(), {"chat-prefill": deployment("chat-prefill", 1)}, []) is None


def test_own_scale_write_counts_until_the_cache_catches_up() -> None:
    live = deployment("chat-decode", 2, rv="10")
    mine = Written(4, "12")
    assert compute_live_replicas(live, None) == (2, "10")
    assert compute_live_replicas(live, mine) == (4, "12")
    assert compute_live_replicas(deployment("d", 4, rv="12"), mine) == (4, "12")
    assert compute_live_replicas(deployment("d", 1, rv="15"), mine) == (1, "15")  # a later edit
    assert compute_live_replicas(deployment("d", None), None) == (1, "10")


def test_only_changed_deletion_costs_are_written() -> None:
    pods = [pod("a", cost="0"), pod("b", cost="5"), pod("c")]
    assert compute_cost_annotations(pods, {"a": 0, "b": 10, "c": 0, "gone": 3}) == {
        "b": "10",
        "c": "0",
    }


def reconciled_live() -> dict[str, Any]:
    """A status as the reconciler writes it."""
    desired = compute_status(isvc(), {})
    patch = compute_status_patch(None, desired, generation=1, now="t0")
    assert patch is not None
    return patch


def make_tick(now: str) -> Tick:
    config = make_config()
    obs = make_obs(100.0, prefill_load(2, 1000.0), decode_load(2, 10, 0.1))
    return compute_tick(None, obs, config, now)


def test_the_tick_patch_keeps_the_reconcilers_conditions_in_place() -> None:
    live = reconciled_live()
    patch = compute_autoscaler_status_patch(live, make_tick("t1"), generation=1, now="t1")
    types = [c["type"] for c in patch["conditions"]]
    assert types == [*(c["type"] for c in live["conditions"]), "ScalingActive", "MetricsAvailable"]
    assert patch["conditions"][: len(live["conditions"])] == live["conditions"]
    assert set(patch) == {"conditions", "pools", "autoscaler"}


def test_transition_time_moves_only_when_an_autoscaler_condition_flips() -> None:
    first = compute_autoscaler_status_patch(None, make_tick("t1"), generation=1, now="t1")
    again = compute_autoscaler_status_patch(first, make_tick("t2"), generation=1, now="t2")
    assert {c["lastTransitionTime"] for c in again["conditions"]} == {"t1"}
    tick = make_tick("t3")
    broken = replace(tick.conditions[1], status="False", reason="MetricsMissing")
    failing = replace(tick, conditions=(tick.conditions[0], broken))
    flipped = compute_autoscaler_status_patch(again, failing, generation=1, now="t3")
    times = {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}
    assert times == {"ScalingActive": "t1", "MetricsAvailable": "t3"}


def test_the_reconciler_keeps_the_autoscalers_conditions_and_pool_fields() -> None:
    live = compute_autoscaler_status_patch(None, make_tick("t1"), generation=1, now="t1")
    live["pools"]["decode"] |= {"replicas": 1, "readyReplicas": 1}
    patch = compute_status_patch(live, compute_status(isvc(), {}), generation=1, now="t2")
    assert patch is not None
    kept = [c for c in patch["conditions"] if c["type"] in ("ScalingActive", "MetricsAvailable")]
    assert kept == live["conditions"]
    assert patch.get("pools", {}).get("decode", {}) == {"replicas": 0, "readyReplicas": 0}


@pytest.mark.parametrize(
    ("current", "desired", "driver", "cause", "label"),
    [
        *((1, 3, driver, "", driver) for driver in DRIVERS),  # a change says its driver
        (3, 2, "kv", "", "kv"),
        (3, 2, "", "", "other"),  # a baseline's change has no driver
        (2, 2, "kv", "", "hold"),  # the need matches the size
        *((3, 3, "demand", cause, cause) for cause in CAUSES),  # a cause overrides
        (1, 2, "demand", "min", "min"),
        (1, 2, "demand", "ratio", "ratio"),
    ],
)
def test_reason_labels(current: int, desired: int, driver: str, cause: str, label: str) -> None:
    decision = PoolDecision("x", current, desired, "x: …", driver=driver, cause=cause)
    assert compute_reason_label(decision) == label


def test_missing_metrics_is_its_own_label() -> None:
    held = PoolDecision(
        "decode",
        2,
        2,
        "decode 2: holding, metrics unavailable (pod d: HTTP 500)",
        metrics_available=False,
    )
    assert compute_reason_label(held) == "metrics"


@settings(max_examples=60, deadline=None)
@given(
    prefill=st.tuples(st.integers(0, 6), st.floats(0, 200_000), st.floats(0, 50)),
    decode=st.tuples(st.integers(0, 6), st.floats(0, 300), st.floats(0, 1)),
    failed=st.booleans(),
    policy=st.sampled_from(["slo", "queue", "static"]),
)
def test_every_policy_decision_gets_a_known_label_and_most_a_specific_one(
    prefill: tuple[int, float, float],
    decode: tuple[int, float, float],
    failed: bool,
    policy: str,
) -> None:
    pools = [
        prefill_load(prefill[0], prefill[1], prefill[2]),
        decode_load(decode[0], decode[1], decode[2]),
    ]
    if failed:
        pools[1] = make_pool("decode", decode[0], failed={"d-0": "HTTP 500"})
    _, decision = decide(PolicyState(), make_obs(1000.0, *pools), make_config(policy=policy))
    for d in decision.pools.values():
        label = compute_reason_label(d)
        assert label in REASON_LABELS, d.reason
        assert label != "other", d.reason
