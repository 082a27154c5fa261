"""The oracle: its arithmetic, and that it is a lower bound."""

from __future__ import annotations

import pytest

from tandem.sim.bounds.oracle import compute_demand, compute_oracle, compute_schedule_s
from tandem.sim.compare.results import RunResult, summarize
from tandem.sim.compare.runs import Scenario, run_policy
from tandem.sim.fleet.simulation import Simulation, SimulationOptions
from tandem.sim.fleet.spec import build_fleet_plan
from tandem.traces.parse import TraceRequest
from tests.sim.factories import conv_slice, make_isvc, make_scenario, make_trace


def meets_targets(result: RunResult, scenario: Scenario) -> bool:
    """TTFT and ITL at their percentiles within target, and nobody turned away."""
    targets = scenario.plan.targets
    assert targets.ttft_s is not None and targets.itl_s is not None
    return (
        result.ttft_p90_s <= targets.ttft_s
        and result.itl_p90_s <= targets.itl_s
        and result.rejected + result.aborted == 0
    )


def assert_bounded_by_oracle(scenario: Scenario, results: dict[str, RunResult]) -> None:
    oracle = scenario.oracle
    for name, result in results.items():
        assert oracle.gpu_hours <= result.gpu_hours, name
        for role, pool in oracle.pools.items():
            if role in result.gpu_hours_by_pool:
                assert pool.gpu_hours <= result.gpu_hours_by_pool[role], (name, role)


def test_the_oracle_never_exceeds_a_policy_meeting_the_targets(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    # A fourfold step with no warning: the fleets provisioned for it meet the targets.
    meeting = {n: r for n, (r, _) in bursty_runs.items() if meets_targets(r, bursty)}
    assert {"static", "aggregated"} <= set(meeting)
    assert_bounded_by_oracle(bursty, meeting)


def test_the_oracle_never_exceeds_tandem_on_real_traffic() -> None:
    scenario = make_scenario(conv_slice(300.0, rate_scale=10.0), warmup_s=60.0)
    result, _ = run_policy("tandem", scenario)
    assert meets_targets(result, scenario)
    assert scenario.oracle.peak_replicas["prefill"] >= 2
    assert_bounded_by_oracle(scenario, {"tandem": result})


def test_a_fleet_below_the_oracle_misses_the_targets() -> None:
    """Why the bound is over schedules that meet the targets: a fleet too small for the
    load spends less than the oracle, and it shows in the latency."""
    # Decode-heavy: one decode pod keeps up in throughput only with batches far slower
    # than the ITL target; the oracle needs two.
    scenario = make_scenario(make_trace(3000, 15.0, prompt=200, output=300), warmup_s=0.0)
    assert scenario.oracle.peak_replicas["decode"] >= 2
    options = SimulationOptions(initial_replicas={"prefill": 1, "decode": 1})
    sim = Simulation(scenario.plan, scenario.requests, None, options).run()
    result = summarize(sim, "starved")
    assert result.gpu_hours < scenario.oracle.gpu_hours
    assert not meets_targets(result, scenario)


def test_demand_keeps_every_prompt_and_places_tokens_up_to_the_horizon() -> None:
    trace = [TraceRequest(0.0, 100, 10), TraceRequest(30.0, 50, 4), TraceRequest(90.0, 7, 1)]
    demand = compute_demand(trace, 60.0, 0.05)
    assert [d.length_s for d in demand] == [60.0, 30.0]
    assert [d.prompt_tokens for d in demand] == [150, 7]
    assert [d.prompts for d in demand] == [2, 1]
    # the last request's token would come after the last arrival: left out
    assert sum(d.output_tokens for d in demand) == pytest.approx(14.0)


def test_schedule_pays_cold_starts_and_bridges_short_gaps() -> None:
    assert compute_schedule_s([1, 1], [60.0, 60.0], 120.0) == 120.0
    assert compute_schedule_s([1, 2, 1, 2], [60.0] * 4, 120.0) == 540.0
    # a long gap: release and pay one cold start instead of the gap
    assert compute_schedule_s([2, 1, 1, 1, 2], [60.0] * 5, 30.0) == 300.0 + 60.0 + 30.0 + 60.0
    assert compute_schedule_s([0, 3], [60.0, 30.0], 10.0) == 3 * (30.0 + 10.0)


def test_the_oracle_grows_with_load_and_respects_bounds() -> None:
    plan = build_fleet_plan(make_isvc(prefill_max=3, decode_max=3))
    light = compute_oracle(plan, make_trace(600, 5.0))
    heavy = compute_oracle(plan, make_trace(6000, 50.0))
    assert heavy.gpu_hours > light.gpu_hours
    assert max(heavy.pools["prefill"].replicas) <= 3
    assert min(light.pools["decode"].replicas) >= 1
    assert all(n >= r for n, r in zip(heavy.pools["prefill"].need, [0.0] * 99, strict=False))
