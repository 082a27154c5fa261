"""The autoscaler's ``tandem_autoscaler_*`` series: set each tick, removed with the service.

No I/O. The metric families live on the operator's registry
(:class:`~tandem.control.metrics.OperatorMetrics`); this module remembers which label
sets each InferenceService has, so its series disappear when it is deleted, and all of
them when this replica stops leading (a standby exports none: two replicas' stale values
would otherwise be aggregated). Reasons become bounded codes
(:func:`~tandem.control.scaling.compute_reason_label`), never free text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from tandem.control.children import ServiceKey
from tandem.control.metrics import OperatorMetrics
from tandem.control.scaling import compute_reason_label
from tandem.observe.types import Observation
from tandem.policy.config import LatencyTargets, PolicyConfig
from tandem.policy.types import Decision
from tandem.router.config import DEFAULT_CLASS
from tandem.router.metrics import ITL_BUCKETS_S, LATENCY_BUCKETS_S

Labels = tuple[str, ...]


@dataclass(frozen=True)
class SloSeries:
    """One latency target as the alerts read it."""

    pool: str
    signal: str
    """``ttft`` or ``itl``."""
    klass: str
    le: str
    """The router bucket bound that counts as fast enough, as the router exports it."""
    target_s: float
    objective: float
    """The percentile as a ratio (p90 → 0.9)."""


def compute_bucket_le(target_s: float, buckets: Iterable[float]) -> str:
    """The largest bucket bound not above ``target_s`` (the smallest when all are), as
    the router's prometheus_client writes ``le`` (``repr`` of the float, for bounds
    between 1e-4 and 1e6).

    >>> compute_bucket_le(0.8, (0.5, 0.8, 1.0)), compute_bucket_le(0.9, (0.5, 0.8, 1.0))
    ('0.8', '0.8')
    >>> compute_bucket_le(0.001, (0.005, 0.01))
    '0.005'
    """
    bounds = sorted(buckets)
    below = [b for b in bounds if b <= target_s + 1e-12]
    return repr(float(below[-1] if below else bounds[0]))


def compute_slo_series(config: PolicyConfig) -> list[SloSeries]:
    """Every class's TTFT and ITL target, on the pool each signal loads: ``ttft`` →
    ``prefill``, ``itl`` → ``decode`` (both → ``pool`` when aggregated)."""
    classes: dict[str, LatencyTargets] = dict(config.class_targets) or {
        DEFAULT_CLASS: config.targets
    }
    aggregated = "pool" in config.pools
    out: list[SloSeries] = []
    for name, t in sorted(classes.items()):
        for signal, target, pct, buckets, pool in (
            ("ttft", t.ttft_s, t.ttft_percentile, LATENCY_BUCKETS_S, "prefill"),
            ("itl", t.itl_s, t.itl_percentile, ITL_BUCKETS_S, "decode"),
        ):
            if target is None:
                continue
            where = "pool" if aggregated else pool
            le = compute_bucket_le(target, buckets)
            out.append(SloSeries(where, signal, name, le, target, pct / 100))
    return out


class AutoscalerSeries:
    """Sets and forgets the per-service autoscaler series of one operator."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self.m = metrics
        self._families = {
            "desired": metrics.desired_replicas,
            "max": metrics.max_replicas,
            "available": metrics.metrics_available,
            "decisions": metrics.decisions,
            "signals": metrics.signals,
            "failures": metrics.scrape_failures,
            "slo_target": metrics.slo_target,
            "slo_objective": metrics.slo_objective,
        }
        self._owned: dict[ServiceKey, set[tuple[str, Labels]]] = {}

    def record(
        self, key: ServiceKey, config: PolicyConfig, obs: Observation, decision: Decision
    ) -> None:
        """Export what one tick of service ``key`` saw and decided."""
        ns, name = key
        now: set[tuple[str, Labels]] = set()

        def mark(family: str, labels: Labels) -> Labels:
            now.add((family, labels))
            return labels

        for role, d in decision.pools.items():
            pool = (ns, name, role)
            self.m.desired_replicas.labels(*mark("desired", pool)).set(d.desired)
            cfg = config.pools.get(role)
            if cfg is not None:
                self.m.max_replicas.labels(*mark("max", pool)).set(cfg.max_replicas)
            self.m.metrics_available.labels(*mark("available", pool)).set(
                1 if d.metrics_available else 0
            )
            labels = mark("decisions", (*pool, d.direction, compute_reason_label(d)))
            self.m.decisions.labels(*labels).inc()
            for signal, value in sorted(d.signals.items()):
                self.m.signals.labels(*mark("signals", (*pool, signal))).set(value)
            observed = obs.pools.get(role)
            failed = len(observed.failed) if observed is not None else 0
            self.m.scrape_failures.labels(*mark("failures", pool)).inc(failed)
        router_failed = sum(1 for e in obs.errors if e.startswith("router pod "))
        self.m.scrape_failures.labels(*mark("failures", (ns, name, "router"))).inc(router_failed)
        for slo in compute_slo_series(config):
            base = (ns, name, slo.pool, slo.signal, slo.klass)
            self.m.slo_target.labels(*mark("slo_target", (*base, slo.le))).set(slo.target_s)
            self.m.slo_objective.labels(*mark("slo_objective", base)).set(slo.objective)
        before = self._owned.get(key, set())
        # Counters keep counting; gauges whose label set this tick did not produce (a
        # removed pool, a signal the policy no longer reports, a changed target) go.
        kept = {(f, labels) for f, labels in before if f in ("decisions", "failures")}
        for family, labels in before - now - kept:
            self._remove(family, labels)
        self._owned[key] = now | kept

    def forget(self, key: ServiceKey) -> None:
        """Remove every series of service ``key`` (it was deleted)."""
        for family, labels in self._owned.pop(key, set()):
            self._remove(family, labels)

    def forget_all(self) -> None:
        """Remove every autoscaler series (this replica stops leading)."""
        for key in list(self._owned):
            self.forget(key)

    def _remove(self, family: str, labels: Labels) -> None:
        with contextlib.suppress(KeyError):
            self._families[family].remove(*labels)
