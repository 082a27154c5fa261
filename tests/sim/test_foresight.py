"""The oracle's schedule replayed with foresight: what the bound's own fleet achieves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tandem.policy.config import PoolConfig
from tandem.sim.bounds.foresight import HEADROOM_STEPS, OracleSchedule, search_headroom
from tandem.sim.bounds.oracle import Oracle, PoolOracle
from tandem.sim.compare.runs import ORACLE_SCHEDULE, run_oracle_schedule, run_policy
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


def test_headroom_multiplies_the_need_and_rounds_up() -> None:
    plan = replace(schedule((1, 1, 1, 4, 1, 1, 1, 1, 2)), headroom={"prefill": 1.1})
    assert plan.need("prefill", 0.0) == 5  # 4.4
    assert plan.need("prefill", 40.0) == 2  # 1.1
    assert replace(plan, headroom={"prefill": 2.0}).need("prefill", 0.0) == 8


@dataclass(frozen=True)
class Outcome:
    attainment: float
    gpu_hours: float


def test_the_search_raises_the_pool_that_buys_the_most_attainment() -> None:
    # Prefill headroom pays (each step +4 points for 1 GPU-h); decode's does not.
    def run(headroom: Mapping[str, float]) -> Outcome:
        p = HEADROOM_STEPS.index(headroom["prefill"])
        d = HEADROOM_STEPS.index(headroom["decode"])
        return Outcome(0.88 + 0.04 * p + 0.005 * d, 5.0 + p + d)

    found = search_headroom(run, ("prefill", "decode"), goal=0.99)
    assert found.met and dict(found.headroom) == {"prefill": 1.5, "decode": 1.0}
    assert found.result == Outcome(1.0, 8.0)
    assert found.tried[0] == ({"prefill": 1.0, "decode": 1.0}, Outcome(0.88, 5.0))
    assert len(found.tried) == 7  # the start, then two candidates in each of 3 rounds


def test_the_search_says_when_no_headroom_meets_the_goal() -> None:
    found = search_headroom(
        lambda h: Outcome(0.5 + 0.1 * h["prefill"], sum(h.values())),
        ("prefill",),
        goal=0.99,
        steps=(1.0, 2.0),
    )
    assert not found.met and dict(found.headroom) == {"prefill": 2.0}


def test_the_search_stops_when_headroom_buys_nothing() -> None:
    # A tenth of the requests can be served by no fleet: attainment is stuck at 0.9.
    found = search_headroom(lambda h: Outcome(0.9, sum(h.values())), ("prefill", "decode"), 0.99)
    assert not found.met and len(found.tried) == 5  # the start and two flat rounds


def test_one_flat_round_is_not_the_end() -> None:
    # Replay noise: the first step up buys nothing, the next one meets the goal.
    def run(headroom: Mapping[str, float]) -> Outcome:
        level = HEADROOM_STEPS.index(headroom["prefill"])
        return Outcome(0.985 if level < 2 else 0.995, 1.0 + level)

    found = search_headroom(run, ("prefill",), 0.99)
    assert found.met and dict(found.headroom) == {"prefill": 1.25}


def test_the_search_can_hold_another_share_to_the_goal() -> None:
    @dataclass(frozen=True)
    class Feasible:
        attainment: float
        gpu_hours: float
        attainment_feasible: float

    found = search_headroom(
        lambda h: Feasible(0.8, 1.0, 0.995),
        ("prefill",),
        0.99,
        measure=lambda r: r.attainment_feasible,
    )
    assert found.met and len(found.tried) == 1


def test_headroom_buys_attainment_on_a_real_replay() -> None:
    scenario = make_scenario(conv_slice(240.0, rate_scale=8.0), warmup_s=60.0)
    plain = run_oracle_schedule(scenario, {})
    padded = run_oracle_schedule(scenario, {"prefill": 2.0, "decode": 2.0})
    assert padded.gpu_hours > 1.5 * plain.gpu_hours
    assert padded.attainment >= plain.attainment
    assert padded.ttft_p90_s <= plain.ttft_p90_s
