"""The operator's autoscaler tick: state through status, patches, conditions, deletion costs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.control.tick import compute_deletion_costs, compute_tick
from tandem.observe.types import LatencyObservation, PodObservation
from tests.policy.factories import decode_load, make_config, make_obs, make_pool, prefill_load

NOW = "2026-01-01T00:00:00Z"


def test_tick_scales_only_changed_pools_and_writes_status() -> None:
    obs = make_obs(0, prefill_load(2, 60_000), decode_load(2, 10, 0.1))
    tick = compute_tick(None, obs, make_config(), NOW)
    assert tick.scale == {"prefill": 6}
    pools = tick.status["pools"]
    assert pools["prefill"]["desiredReplicas"] == 6 and pools["decode"]["desiredReplicas"] == 2
    last = pools["prefill"]["lastDecision"]
    assert (last["fromReplicas"], last["toReplicas"]) == (2, 6)
    assert "prompt demand" in last["reason"]
    assert "lastDecision" not in pools["decode"]
    types = {c.type: c for c in tick.conditions}
    assert types["ScalingActive"].status == "True"
    assert types["MetricsAvailable"].status == "True"
    assert set(tick.status) == {"pools", "autoscaler"}


def test_state_survives_through_status() -> None:
    config = make_config()
    status: dict[str, Any] = {}
    for t in range(0, 300, 15):
        obs = make_obs(t, prefill_load(6, 45_000), decode_load(2, 10, 0.1))
        status = compute_tick(status, obs, config, NOW).status
    quiet = make_obs(300, prefill_load(6, 500), decode_load(2, 10, 0.1))
    # An operator restarted now still remembers the busy window: no scale-down yet ...
    assert compute_tick(status, quiet, config, NOW).decision.pools["prefill"].desired == 6
    # ... and once the window has passed without load, it scales down.
    for t in range(315, 630, 15):
        tick = compute_tick(
            status, make_obs(t, prefill_load(6, 500), decode_load(2, 10, 0.1)), config, NOW
        )
        status = tick.status
    assert tick.decision.pools["prefill"].desired == 5


def test_missing_metrics_condition_names_the_pod() -> None:
    broken = make_pool("decode", 3, scraped=2, failed={"chat-decode-abc": "connection refused"})
    tick = compute_tick(None, make_obs(0, prefill_load(2, 1_000), broken), make_config(), NOW)
    cond = next(c for c in tick.conditions if c.type == "MetricsAvailable")
    assert cond.status == "False" and cond.reason == "MetricsMissing"
    assert "chat-decode-abc: connection refused" in cond.message
    assert tick.scale == {}


def test_deletion_cost_prefers_the_least_loaded_pods() -> None:
    pods = {
        "a": PodObservation(running_requests=40),
        "b": PodObservation(running_requests=2),
        "c": PodObservation(running_requests=0, waiting_requests=1),
    }
    costs = compute_deletion_costs(make_pool("decode", 3, pods=pods))
    assert sorted(costs, key=costs.__getitem__) == ["c", "b", "a"]


def test_pods_still_starting_are_not_missing_metrics() -> None:
    starting = make_pool("decode", 3, ready=0, scraped=0)
    tick = compute_tick(None, make_obs(0, prefill_load(2, 1_000), starting), make_config(), NOW)
    decode = tick.decision.pools["decode"]
    assert decode.desired == 3 and decode.metrics_available
    assert "3 pod(s) starting, none ready yet" in decode.reason
    cond = next(c for c in tick.conditions if c.type == "MetricsAvailable")
    assert cond.status == "True"


def test_scaling_is_inactive_while_no_pool_has_metrics() -> None:
    broken = {"d-0": "HTTP 500"}
    obs = make_obs(
        0,
        make_pool("prefill", 2, scraped=0, failed={"p-0": "timeout"}),
        make_pool("decode", 2, scraped=0, failed=broken),
    )
    tick = compute_tick(None, obs, make_config(), NOW)
    active = next(c for c in tick.conditions if c.type == "ScalingActive")
    assert active.status == "False" and active.reason == "MetricsMissing"
    static = compute_tick(None, obs, make_config(policy="static"), NOW)
    active = next(c for c in static.conditions if c.type == "ScalingActive")
    assert active.reason == "StaticPolicy"


def test_a_router_that_did_not_answer_is_said_even_when_the_engines_did() -> None:
    obs = make_obs(0, prefill_load(2, 1_000), decode_load(2, 10, 0.1))
    obs = replace(obs, errors=("router pod r-0: HTTP 503 from http://r-0/metrics",))
    tick = compute_tick(None, obs, make_config(), NOW)
    cond = next(c for c in tick.conditions if c.type == "MetricsAvailable")
    assert cond.status == "True" and "router pod r-0: HTTP 503" in cond.message


def test_the_window_s_infeasible_and_absorbed_requests_go_to_status() -> None:
    obs = make_obs(0, prefill_load(2, 8_000), decode_load(2, 10, 0.1))
    obs = replace(
        obs,
        latency_by_class={
            "docs": LatencyObservation(
                ttft_s={90: 4.0},
                requests=45.0,
                queueing_ratio={90: 0.4},
                feasible_requests=30.0,
                infeasible_requests={"ttft": 15.0},
            )
        },
        absorbed_requests_per_s=0.4,
        absorbed_prompt_tokens_per_s=800.0,
    )
    requests = compute_tick(None, obs, make_config(), NOW).status["autoscaler"]["requests"]
    assert requests["per_s"] == 3.0 and requests["infeasible_per_s"] == {"ttft": 1.0}
    assert (requests["absorbed_per_s"], requests["absorbed_prompt_tokens_per_s"]) == (0.4, 800.0)
