"""The oracle's schedule, replayed through the simulated fleet. Pure.

The oracle (:mod:`tandem.sim.bounds.oracle`) counts GPU-hours from its cost-model capacity
without serving a request. :class:`OracleSchedule` is an autoscaler with the oracle's
perfect knowledge: at every tick it sizes each pool for the largest per-window need of
the oracle from now until the next tick's pods could be ready (a cold start and an
interval ahead), so pods are up when the oracle says they are needed and gone when it
says they are not. Running it shows what the oracle's schedule achieves when requests
are really served, queueing, KV hand-off and bursts inside a window included: how far
the bound is from a fleet that meets the targets.

With a ``headroom`` per pool the schedule asks for that multiple of the oracle's need.
:func:`search_headroom` raises it pool by pool until the schedule meets an attainment
goal: the cheapest such foresight schedule found is a fleet that *does* meet the targets,
a reference an autoscaler without foresight can be measured against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision
from tandem.sim.bounds.oracle import Oracle

#: The multiples of the oracle's need :func:`search_headroom` tries, in order
#: (``1.1`` adds one replica to any need up to 10).
HEADROOM_STEPS = (1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)


@dataclass
class OracleSchedule:
    """An autoscaler that follows ``oracle``'s per-window replicas with foresight."""

    oracle: Oracle
    pools: dict[PoolRole, PoolConfig]
    interval_s: float
    cold_start_s: float
    measure_from_s: float
    """Simulation time at which the oracle's first window begins (after the warm-up)."""
    name: str = "oracle-schedule"
    headroom: Mapping[str, float] = field(default_factory=dict)
    """Role → multiple of the oracle's need to ask for (1 when absent)."""

    def initial_state(self) -> None:
        return None

    def decide(self, state: None, obs: Observation) -> tuple[None, Decision]:
        def size(role: PoolRole, _pool: object, _cfg: PoolConfig) -> tuple[int, str]:
            n = self.need(role, obs.now_s)
            return n, f"the oracle's schedule: {n}"

        return None, per_pool(obs, self.pools, size)

    def need(self, role: PoolRole, now_s: float) -> int:
        """The largest oracle need from ``now_s`` until pods started now are ready and
        have served an interval, times the pool's headroom. The warm-up replays the
        trace's start mirrored in time, so before the trace the need is the oracle's at
        the mirrored time."""
        return math.ceil(self.headroom.get(role, 1.0) * self._oracle_need(role, now_s) - 1e-9)

    def _oracle_need(self, role: PoolRole, now_s: float) -> int:
        replicas = self.oracle.pools[role].replicas
        if not replicas:
            return 0
        window = self.oracle.window_s
        end = now_s + self.cold_start_s + self.interval_s
        best, t = 0, now_s
        while True:
            trace_s = abs(t - self.measure_from_s)
            best = max(best, replicas[min(int(trace_s // window), len(replicas) - 1)])
            if t >= end:
                return best
            t = min(t + window / 2, end)


class Outcome(Protocol):
    """What :func:`search_headroom` reads of a run
    (a :class:`~tandem.sim.compare.results.RunResult`)."""

    @property
    def attainment(self) -> float: ...

    @property
    def gpu_hours(self) -> float: ...


R = TypeVar("R", bound=Outcome)


@dataclass(frozen=True)
class HeadroomSearch(Generic[R]):
    """What :func:`search_headroom` found."""

    headroom: Mapping[str, float]
    """Role → multiple of the oracle's need of the cheapest run meeting the goal (or of
    the last run, when none did)."""
    result: R
    met: bool
    tried: tuple[tuple[Mapping[str, float], R], ...]
    """Every run, in order."""


def search_headroom(
    run: Callable[[Mapping[str, float]], R],
    roles: tuple[str, ...],
    goal: float,
    steps: tuple[float, ...] = HEADROOM_STEPS,
    measure: Callable[[R], float] | None = None,
) -> HeadroomSearch[R]:
    """Raise each pool's headroom a step at a time until ``run(headroom)`` meets
    ``goal`` attainment (``measure(result)``, by default ``result.attainment``);
    greedy: each round takes the step that gains the most attainment per GPU-hour it
    adds. Stops at the goal, when no pool can rise, or when two rounds in a row gain no
    attainment at all (what is left is out of reach of headroom, such as requests no
    fleet serves in time; one flat round alone can be replay noise near the goal).

    An upper bound of what a foresight schedule needs (a finer search could find a
    cheaper one), and a fleet that really meets the goal.
    """
    share = measure or (lambda r: r.attainment)
    levels = dict.fromkeys(roles, 0)

    def headroom_of(lv: Mapping[str, int]) -> dict[str, float]:
        return {role: steps[i] for role, i in lv.items()}

    result = run(headroom_of(levels))
    tried: list[tuple[Mapping[str, float], R]] = [(headroom_of(levels), result)]
    flat_rounds = 0
    while share(result) < goal:
        best: tuple[float, dict[str, int], R] | None = None
        gained = False
        for role in roles:
            if levels[role] + 1 >= len(steps):
                continue
            lv = {**levels, role: levels[role] + 1}
            trial = run(headroom_of(lv))
            tried.append((headroom_of(lv), trial))
            gain = share(trial) - share(result)
            gained = gained or gain > 0
            cost = trial.gpu_hours - result.gpu_hours
            score = gain / cost if cost > 1e-9 else math.inf * (1 if gain > 0 else -1)
            if best is None or score > best[0]:
                best = (score, lv, trial)
        flat_rounds = 0 if gained else flat_rounds + 1
        if best is None or flat_rounds >= 2:
            break
        _, levels, result = best
    return HeadroomSearch(headroom_of(levels), result, share(result) >= goal, tuple(tried))
