"""Tandem's goal on one run: each criterion, its margins, and the feasible share when the
result counts it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.sim.compare.goal import check_goal, goal_attainment

MAX = {"prefill": 32, "decode": 32}
ORACLE = {"prefill": 6, "decode": 4}


@dataclass(frozen=True)
class Run:
    attainment: float
    gpu_hours: float
    peak_replicas: Mapping[str, int] = field(default_factory=lambda: {"prefill": 8, "decode": 5})


@dataclass(frozen=True)
class FeasibleRun(Run):
    attainment_feasible: float = 1.0


def test_a_run_meeting_every_criterion() -> None:
    check = check_goal(
        Run(0.995, 7.0),
        {"static": Run(0.999, 9.0), "hpa": Run(0.995, 30.0), "llm-d": Run(0.10, 5.0)},
        Run(0.996, 8.0),
        max_replicas=MAX,
        oracle_peak=ORACLE,
    )
    assert check.met and not check.misses()
    assert check.fixed_ratio == 7.0 / 8.0
    assert check.baselines_at_or_above == ("static", "hpa")  # llm-d serves fewer in time
    assert check.baselines_beaten == ("static", "hpa")
    assert check.line().startswith("goal MET: attainment 99.50%, 0.88x fixed-hindsight")


def test_each_miss_says_by_how_much() -> None:
    check = check_goal(
        Run(0.9799, 12.0, {"prefill": 32, "decode": 6}),
        {"static": Run(0.99, 10.0), "keda": Run(0.5, 40.0)},
        Run(0.98, 10.0),
        max_replicas=MAX,
        oracle_peak=ORACLE,
    )
    assert not check.met
    assert check.misses() == [
        "attainment 97.99% is 1.01 points below 99%",
        "20% more GPU-hours than fixed-hindsight at the same attainment",
        "not cheaper than static at equal or higher attainment",
        "prefill at its maximum 32 where the oracle needs at most 6",
    ]
    assert check.line().startswith("goal MISSED:")


def test_a_pool_at_its_maximum_is_fine_when_the_load_needs_it() -> None:
    check = check_goal(
        Run(0.995, 7.0, {"prefill": 32, "decode": 6}),
        {},
        None,
        max_replicas=MAX,
        oracle_peak={"prefill": 32, "decode": 4},
    )
    assert check.max_ok and check.met
    assert check.fixed_ratio is None and check.fixed_ok  # no fixed fleet reached it
    assert "no fixed fleet reaches it" in check.line()


def test_the_feasible_share_is_held_to_the_goal_when_the_result_counts_it() -> None:
    run = FeasibleRun(0.80, 5.0, attainment_feasible=0.995)
    assert goal_attainment(run) == (0.995, "attainment_feasible")
    assert goal_attainment(Run(0.8, 5.0)) == (0.8, "attainment")
    check = check_goal(run, {}, None, max_replicas=MAX, oracle_peak=ORACLE)
    assert check.attainment_ok and check.attainment_field == "attainment_feasible"
