"""The oracle's schedule replayed with foresight: what the bound's own fleet achieves."""

from __future__ import annotations

from tandem.policy.config import PoolConfig
from tandem.sim.compare import ORACLE_SCHEDULE, run_policy
from tandem.sim.foresight import OracleSchedule
from tandem.sim.oracle import Oracle, PoolOracle
from tests.sim.factories import conv_slice, make_scenario


def schedule(replicas: tuple[int, ...], measure_from_s: float = 0.0) -> OracleSchedule:
    oracle = Oracle(10.0, 20.0, {"prefill": PoolOracle("prefill", replicas, 0.0)})
    pools = {"prefill": PoolConfig("prefill", 1, 8, 1)}
    return OracleSchedule(oracle, pools, 15.0, 20.0, measure_from_s)


def test_pods_are_asked_for_a_cold_start_and_a_tick_ahead() -> None:
    plan = schedule((1, 1, 1, 4, 1, 1, 1, 1, 2))
    assert plan.need("prefill", 0.0) == 4  # window 3 (30-40 s) is within 0 + 20 + 15 s
    assert plan.need("prefill", 40.0) == 1  # 40-75 s: windows 4-7
    assert plan.need("prefill", 50.0) == 2  # the last window, and beyond it
    assert plan.need("prefill", 500.0) == 2


def test_the_warm_up_follows_the_mirrored_start_of_the_trace() -> None:
    plan = schedule((1, 5, 1, 1, 1, 1, 1), measure_from_s=60.0)
    assert plan.need("prefill", 0.0) == 1  # 0-35 s of warm-up mirror 60-25 s of the trace
    assert plan.need("prefill", 20.0) == 5  # 20-55 s mirror 40-5 s: window 1 is in
    assert plan.need("prefill", 100.0) == 1  # 40-75 s of the trace


def test_the_replayed_schedule_costs_about_what_the_oracle_counts() -> None:
    # Not exactly: the replay's pods change at ticks, not at window edges, and its
    # GPU-hours end with the last request rather than the last arrival.
    scenario = make_scenario(conv_slice(240.0, rate_scale=8.0), warmup_s=60.0)
    result, _ = run_policy(ORACLE_SCHEDULE, scenario)
    assert 0.9 <= result.gpu_hours / scenario.oracle.gpu_hours <= 1.25
    assert result.completed == result.requests
