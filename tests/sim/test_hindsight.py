"""The best fixed fleet in hindsight: the search finds the cheapest pair meeting a goal on
monotone attainment with few replays, and every static fleet of the real simulator it
reports did reach the goal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.sim.bounds.hindsight import least, least_below, search_fixed_fleet
from tandem.sim.compare.hindsight import find_fixed_hindsight, run_fixed
from tests.sim.factories import conv_slice, make_scenario

GOAL = 0.99


@dataclass(frozen=True)
class Outcome:
    attainment: float
    gpu_hours: float


def staircase(needs: list[int]) -> tuple[object, int]:
    """Attainment meeting the goal where ``b >= needs[a - 1]`` (non-increasing in ``a``),
    and rising slowly with either size below it; the run counter goes with it."""
    calls = {"n": 0}

    def run(sizes: Mapping[str, int]) -> Outcome:
        calls["n"] += 1
        a, b = sizes["prefill"], sizes["decode"]
        met = b >= needs[a - 1]
        return Outcome(0.995 if met else 0.5 + 0.004 * (a + b), float(a + b))

    return run, calls  # type: ignore[return-value]


@st.composite
def frontiers(draw: st.DrawFn) -> list[int]:
    """A non-increasing least decode size per prefill size 1..32 (33: never enough)."""
    steps = draw(st.lists(st.integers(0, 4), min_size=32, max_size=32))
    first = draw(st.integers(1, 33))
    out, b = [], first
    for s in steps:
        out.append(b)
        b = max(b - s, 1)
    return out


@settings(max_examples=200, deadline=None)
@given(
    needs=frontiers(),
    guess=st.fixed_dictionaries({"prefill": st.integers(1, 32), "decode": st.integers(1, 32)}),
    gpus=st.sampled_from([(1, 1), (1, 2), (2, 1)]),
)
def test_the_walk_finds_the_cheapest_pair_a_brute_force_finds(
    needs: list[int], guess: dict[str, int], gpus: tuple[int, int]
) -> None:
    run, _ = staircase(needs)
    weight = {"prefill": gpus[0], "decode": gpus[1]}
    found = search_fixed_fleet(
        run,  # type: ignore[arg-type]
        {"prefill": (1, 32), "decode": (1, 32)},
        GOAL,
        gpus=weight,
        guess=guess,
        max_replays=200,
    )
    feasible = [(a, b) for a in range(1, 33) for b in range(1, 33) if b >= needs[a - 1]]
    if not feasible:
        assert not found.met and dict(found.sizes) == {"prefill": 32, "decode": 32}
        assert len(found.tried) == 1
        return
    best = min(gpus[0] * a + gpus[1] * b for a, b in feasible)
    assert found.met and not found.exhausted
    sizes = found.sizes
    assert gpus[0] * sizes["prefill"] + gpus[1] * sizes["decode"] == best
    assert found.result.attainment >= GOAL
    assert (dict(sizes), found.result) in [(dict(s), r) for s, r in found.tried]
    assert len(found.tried) <= 100  # a tenth of the 1,024 pairs, even on odd frontiers


def test_a_typical_frontier_takes_a_few_replays() -> None:
    # Prefill needs 6 with ample decode, decode 4 with ample prefill; a little trade-off.
    needs = [33] * 5 + [6, 5, 4] + [4] * 24
    run, calls = staircase(needs)
    found = search_fixed_fleet(
        run,  # type: ignore[arg-type]
        {"prefill": (1, 32), "decode": (1, 32)},
        GOAL,
        guess={"prefill": 6, "decode": 4},
    )
    assert dict(found.sizes) == {"prefill": 6, "decode": 6} or dict(found.sizes) == {
        "prefill": 8,
        "decode": 4,
    }
    assert calls["n"] == len(found.tried) <= 16  # type: ignore[index]


def test_the_worked_example_of_the_docstring() -> None:
    needs = [33, 33, 6, 3, 3, 2] + [2] * 26
    run, _ = staircase(needs)
    found = search_fixed_fleet(
        run,  # type: ignore[arg-type]
        {"prefill": (1, 32), "decode": (1, 32)},
        GOAL,
        guess={"prefill": 3, "decode": 2},
    )
    assert dict(found.sizes) == {"prefill": 4, "decode": 3}
    assert {"prefill": 6, "decode": 2} not in [dict(s) for s, _ in found.tried]


def test_one_pool_is_a_bisection() -> None:
    found = search_fixed_fleet(
        lambda s: Outcome(0.995 if s["pool"] >= 9 else 0.5, float(s["pool"])),
        {"pool": (1, 32)},
        GOAL,
        guess={"pool": 4},
    )
    assert dict(found.sizes) == {"pool": 9} and found.met
    assert len(found.tried) <= 7


def test_the_replay_cap_stops_the_search_and_says_so() -> None:
    run, _ = staircase([33] * 5 + [6, 5, 4] + [4] * 24)
    found = search_fixed_fleet(
        run,  # type: ignore[arg-type]
        {"prefill": (1, 32), "decode": (1, 32)},
        GOAL,
        max_replays=3,
    )
    assert found.exhausted and len(found.tried) == 3
    assert found.met and found.result.attainment >= GOAL  # the best it had replayed


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="one or two pools"):
        search_fixed_fleet(lambda s: Outcome(1.0, 1.0), {}, GOAL)
    with pytest.raises(ValueError, match="prefill: bounds must satisfy"):
        search_fixed_fleet(lambda s: Outcome(1.0, 1.0), {"prefill": (3, 2)}, GOAL)
    with pytest.raises(ValueError, match="max_replays must be >= 1"):
        search_fixed_fleet(lambda s: Outcome(1.0, 1.0), {"pool": (1, 2)}, GOAL, max_replays=0)


@given(target=st.integers(1, 64), lo=st.integers(1, 8), guess=st.integers(-5, 80))
def test_least_is_the_least_passing_size(target: int, lo: int, guess: int) -> None:
    seen: list[int] = []

    def ok(n: int) -> bool:
        seen.append(n)
        return n >= target

    hi = 64
    assert least(ok, lo, hi, guess) == max(target, lo)
    assert len(seen) <= 14


def test_on_the_simulator_the_fixed_fleet_found_reaches_the_goal() -> None:
    scenario = make_scenario(conv_slice(180.0, rate_scale=8.0), warmup_s=0.0)
    found = find_fixed_hindsight(scenario, 0.95)
    assert found.met and found.result.attainment >= 0.95
    sizes = dict(found.sizes)
    assert found.result.peak_replicas == sizes
    assert found.result.policy == "fixed-hindsight"
    # One replica fewer in either pool misses the goal (the frontier is tight), or the
    # pool is at its minimum.
    for role in sizes:
        if sizes[role] > 1:
            smaller = run_fixed(scenario, {**sizes, role: sizes[role] - 1})
            assert smaller.attainment < 0.95 or smaller.gpu_hours >= found.result.gpu_hours


@given(target=st.integers(1, 40), lo=st.integers(1, 8))
def test_least_below_is_the_least_passing_size(target: int, lo: int) -> None:
    hi = max(target, lo) + 9
    assert least_below(lambda n: n >= target, lo, hi) == max(target, lo)
