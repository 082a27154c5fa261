"""The autoscaler's decisions: per pool, the size it wants and why. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from tandem.api.vocab import PoolRole

Direction = Literal["up", "down", "hold"]

Driver = Literal["demand", "backlog", "latency", "kv", "rate", "queue", "concurrency", "burst"]
"""What can set a pool's size, as :attr:`PoolDecision.driver` names it: prompt demand, a
prefill backlog, measured latency over target, decode KV demand, decode output rate,
queued decode sequences, decode concurrency (no ITL target), or the burst memory's floor."""
DRIVERS: tuple[Driver, ...] = get_args(Driver)

Cause = Literal["ratio", "min", "max", "traffic", "window", "panic", "metrics", "static", "idle"]
"""What can decide a pool's size over its driver, as :attr:`PoolDecision.cause` names it:
the prefill:decode ratio, the pool's min or max, the router's traffic (a pool woken from
zero), a stabilization window or panic mode holding a scale-down, missing metrics, the
static policy, or a pool at zero with no traffic."""
CAUSES: tuple[Cause, ...] = get_args(Cause)


@dataclass(frozen=True)
class PoolDecision:
    """One pool's decision at one tick."""

    role: PoolRole
    current: int
    desired: int
    reason: str
    """The numbers behind the decision, e.g. ``decode 4→6: KV demand ...``."""
    signals: Mapping[str, float] = field(default_factory=dict)
    """The signals used (demand, capacity, utilization, measured and target latency)."""
    metrics_available: bool = True
    driver: Driver | Literal[""] = ""
    """What set the size (one of :data:`DRIVERS`); empty when the pool was held without
    sizing (missing metrics, static policy, no traffic) or by a baseline."""
    cause: Cause | Literal[""] = ""
    """What overrode the driver (one of :data:`CAUSES`), or empty when the driver's size
    stands (or the need matched the size)."""

    @property
    def direction(self) -> Direction:
        if self.desired > self.current:
            return "up"
        return "down" if self.desired < self.current else "hold"


@dataclass(frozen=True)
class Decision:
    """Every pool's decision at ``now_s``."""

    now_s: float
    pools: Mapping[PoolRole, PoolDecision]

    @property
    def metrics_available(self) -> bool:
        return all(p.metrics_available for p in self.pools.values())

    @property
    def changes(self) -> dict[PoolRole, PoolDecision]:
        """Pools whose size changes."""
        return {r: p for r, p in self.pools.items() if p.desired != p.current}
