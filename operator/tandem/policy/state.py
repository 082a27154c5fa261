"""Autoscaler state kept across ticks and operator restarts. Pure.

Everything here round-trips through ``status.autoscaler`` of the InferenceService
(:meth:`PolicyState.to_dict` / :meth:`PolicyState.from_dict`), so a restarted operator
keeps its stabilization windows, last scale times and learned capacities. Beside the
pools, ``requests`` (:class:`RequestTally`) tells people what the router counted in the
last window: requests no pool size could serve in time, and requests decode engines
absorbed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tandem.api.vocab import PoolRole, parse_pool_role


@dataclass(frozen=True)
class PoolState:
    """What the policy remembers about one pool."""

    recommendations: tuple[tuple[float, int], ...] = ()
    """(time s, replicas) recommended at recent ticks, oldest first (the windows)."""
    last_scale_s: float | None = None
    """When the pool's size last changed."""
    demand_level: float | None = None
    """Smoothed demand (prefill: prompt tokens/s; decode: concurrent sequences)."""
    demand_trend_per_s: float = 0.0
    """Smoothed change of the demand per second (Holt's linear trend)."""
    demand_time_s: float | None = None
    """When the demand was last smoothed."""
    learned_capacity: float | None = None
    """Learned prompt tokens/s one prefill replica sustains."""
    backlog_tokens: float | None = None
    """Prompt tokens waiting at the last tick (prefill), to tell how fast it grows."""
    learned_batch: float | None = None
    """Learned largest decode batch per replica whose ITL meets the target."""
    proven_batch: float | None = None
    """Largest decode batch per replica seen with its ITL within target (a lower bound
    of ``learned_batch``, slowly forgotten)."""
    step_fit: tuple[float, ...] | None = None
    """Weighted sums of the decode step-time plane (:class:`~tandem.policy.learn.StepFit`)."""
    peak_need: float | None = None
    """Largest recent replica need, decaying (the burst memory)."""
    peak_time_s: float | None = None
    """When ``peak_need`` was last updated."""
    panic_until_s: float | None = None
    """Scale-downs are held until this time after a panic tick."""

    def with_recommendation(self, now_s: float, replicas: int, keep_s: float) -> PoolState:
        """This state with ``replicas`` recommended at ``now_s``, keeping ``keep_s``.

        A run of equal recommendations is kept as its first and last entries: every
        window that ends now sees the same values (the min and max of the windows are
        unchanged) while status stays small at short intervals. A run reaching back past
        the kept span starts at its edge, so the span still counts as covered.

        >>> s = PoolState()
        >>> for t in range(0, 50, 10):
        ...     s = s.with_recommendation(t, 2, keep_s=25)
        >>> s.recommendations
        ((15, 2), (40, 2))
        >>> s.with_recommendation(50, 3, keep_s=25).recommendations
        ((25, 2), (40, 2), (50, 3))
        """
        cutoff = now_s - keep_s
        recs = self.recommendations
        kept = [(t, n) for t, n in recs if t >= cutoff]
        gone = len(recs) - len(kept)
        if gone and kept and recs[gone - 1][1] == kept[0][1]:
            kept.insert(0, (cutoff, kept[0][1]))
        if len(kept) >= 2 and kept[-2][1] == kept[-1][1] == replicas:
            kept[-1] = (now_s, replicas)
        else:
            kept.append((now_s, replicas))
        return replace(self, recommendations=tuple(kept))


@dataclass(frozen=True)
class RequestTally:
    """What the router saw of the requests of the last window, for people reading
    ``status.autoscaler.requests``: nothing here drives a decision."""

    window_s: float = 0.0
    per_s: float = 0.0
    """Requests/s that got their first token."""
    infeasible_per_s: Mapping[str, float] = field(default_factory=dict)
    """Of those, requests/s no pool size could serve within target, by reason (``ttft``,
    ``itl``); left out of the latency the pools are sized on."""
    absorbed_per_s: float = 0.0
    """Requests/s a decode engine prefilled because the prefill pool's wait would have
    overrun their TTFT target."""
    absorbed_prompt_tokens_per_s: float = 0.0
    """Their prompt tokens/s (counted as prefill demand all the same)."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "infeasible_per_s": dict(self.infeasible_per_s)}

    @classmethod
    def from_dict(cls, data: object) -> RequestTally:
        """Inverse of :meth:`to_dict`; anything malformed gives an empty tally."""
        if not isinstance(data, Mapping):
            return cls()
        try:
            return cls(
                window_s=float(data.get("window_s", 0.0)),
                per_s=float(data.get("per_s", 0.0)),
                infeasible_per_s={
                    str(k): float(v) for k, v in dict(data.get("infeasible_per_s", {})).items()
                },
                absorbed_per_s=float(data.get("absorbed_per_s", 0.0)),
                absorbed_prompt_tokens_per_s=float(data.get("absorbed_prompt_tokens_per_s", 0.0)),
            )
        except (TypeError, ValueError):
            return cls()


@dataclass(frozen=True)
class PolicyState:
    """State of every pool of one service."""

    pools: Mapping[PoolRole, PoolState] = field(default_factory=dict)
    requests: RequestTally = field(default_factory=RequestTally)
    """The last window's requests as the router counted them (infeasible, absorbed)."""

    def pool(self, role: PoolRole) -> PoolState:
        return self.pools.get(role, PoolState())

    def with_pool(self, role: PoolRole, pool: PoolState) -> PolicyState:
        return replace(self, pools={**self.pools, role: pool})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``status.autoscaler``."""
        return {
            "pools": {
                role: {
                    **asdict(p),
                    "recommendations": [[round(t, 3), n] for t, n in p.recommendations],
                    "step_fit": list(p.step_fit) if p.step_fit is not None else None,
                }
                for role, p in self.pools.items()
            },
            "requests": self.requests.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PolicyState:
        """Inverse of :meth:`to_dict`; unknown or malformed input gives a fresh state."""
        if not isinstance(data, Mapping) or not isinstance(data.get("pools"), Mapping):
            return cls()
        pools: dict[PoolRole, PoolState] = {}
        names = set(PoolState.__dataclass_fields__)
        for name, raw in data["pools"].items():
            role = parse_pool_role(name)
            if role is None or not isinstance(raw, Mapping):
                continue
            try:
                values = {k: v for k, v in raw.items() if k in names}
                recs = tuple((float(t), int(n)) for t, n in values.pop("recommendations", ()))
                fit = values.pop("step_fit", None)
                step_fit = tuple(float(v) for v in fit) if fit is not None else None
                pools[role] = PoolState(recommendations=recs, step_fit=step_fit, **values)
            except (TypeError, ValueError):
                pools[role] = PoolState()
        return cls(pools, RequestTally.from_dict(data.get("requests")))
