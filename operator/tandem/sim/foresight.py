"""The oracle's schedule, replayed through the simulated fleet. Pure.

The oracle (:mod:`tandem.sim.oracle`) counts GPU-hours from its cost-model capacity
without serving a request. :class:`OracleSchedule` is an autoscaler with the oracle's
perfect knowledge: at every tick it sizes each pool for the largest per-window need of
the oracle from now until the next tick's pods could be ready (a cold start and an
interval ahead), so pods are up when the oracle says they are needed and gone when it
says they are not. Running it shows what the oracle's schedule achieves when requests
are really served, queueing, KV hand-off and bursts inside a window included: how far
the bound is from a fleet that meets the targets.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.observe.types import Observation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision
from tandem.sim.oracle import Oracle


@dataclass
class OracleSchedule:
    """An autoscaler that follows ``oracle``'s per-window replicas with foresight."""

    oracle: Oracle
    pools: dict[str, PoolConfig]
    interval_s: float
    cold_start_s: float
    measure_from_s: float
    """Simulation time at which the oracle's first window begins (after the warm-up)."""
    name: str = "oracle-schedule"

    def initial_state(self) -> None:
        return None

    def decide(self, state: None, obs: Observation) -> tuple[None, Decision]:
        def size(role: str, _pool: object, _cfg: PoolConfig) -> tuple[int, str]:
            n = self.need(role, obs.now_s)
            return n, f"the oracle's schedule: {n}"

        return None, per_pool(obs, self.pools, size)

    def need(self, role: str, now_s: float) -> int:
        """The largest oracle need from ``now_s`` until pods started now are ready and
        have served an interval. The warm-up replays the trace's start mirrored in time,
        so before the trace the need is the oracle's at the mirrored time."""
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
