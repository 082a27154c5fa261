"""The ``fixed-hindsight`` reference of a comparison: the cheapest static fleet that
reaches an attainment on the whole trace, searched by replaying static fleets of the
scenario (:func:`tandem.sim.bounds.hindsight.search_fixed_fleet`). Pure.

``tandem simulate`` asks it for Tandem's own attainment, so the two spend GPU-hours for
the same share of requests meeting their targets: an autoscaler that spends more than
the fleet an operator could have fixed in hindsight has no reason to run. The search
starts from the oracle's peak need per pool and stays within each pool's bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

from tandem.api.vocab import PoolRole
from tandem.sim.bounds.hindsight import (
    DEFAULT_MAX_REPLAYS,
    FixedFleetSearch,
    fixed_fleet_guess,
    search_fixed_fleet,
)
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import FIXED_HINDSIGHT, Scenario, run_static


def run_fixed(scenario: Scenario, sizes: Mapping[PoolRole, int]) -> RunResult:
    """The scenario's trace through a fleet fixed at ``sizes``."""
    return run_static(FIXED_HINDSIGHT, scenario, sizes)[0]


def find_fixed_hindsight(
    scenario: Scenario,
    goal: float,
    *,
    max_replays: int = DEFAULT_MAX_REPLAYS,
    progress: Callable[[Mapping[str, int], RunResult], None] | None = None,
) -> FixedFleetSearch[RunResult]:
    """The cheapest fixed fleet found whose attainment reaches ``goal`` (0-1);
    ``progress(sizes, result)`` is called after each replay."""
    plan = scenario.plan

    def run(sizes: Mapping[str, int]) -> RunResult:
        result = run_fixed(scenario, {cast(PoolRole, role): n for role, n in sizes.items()})
        if progress is not None:
            progress(sizes, result)
        return result

    peak: dict[str, float] = {
        role: max(p.need, default=0.0) for role, p in scenario.oracle.pools.items()
    }
    return search_fixed_fleet(
        run,
        {role: (max(p.min_replicas, 1), max(p.max_replicas, 1)) for role, p in plan.pools.items()},
        goal,
        gpus={role: p.gpus_per_replica for role, p in plan.pools.items()},
        guess=fixed_fleet_guess(peak),
        max_replays=max_replays,
    )
