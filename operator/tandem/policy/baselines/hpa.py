"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) with its default behavior. Pure.

Follows Kubernetes v1.34's controller (``pkg/controller/podautoscaler``):

* **Per-pod metrics** (``type: Pods``, here the pool's GPU utilization as DCGM exports
  it) go through ``calcPlainMetricReplicas`` of ``replica_calculator.go``
  (:func:`compute_pod_metric_replicas`): the usage ratio is the mean over the pods that
  reported a value over the target, and the new count is ``ceil(ratio x ready pods)``,
  the pods that reported, not every pod of the Deployment. Pods not ready yet (still
  starting: in the simulator a pod reports no metrics during its cold start) are
  *unready*: left out of a scale-down, and counted as using nothing when the pool would
  grow, so that a pool whose new pods are still starting does not double again. Within
  the 10 % tolerance nothing changes.
* **External metrics with an ``AverageValue`` target** (what KEDA feeds the HPA,
  :class:`~tandem.policy.baselines.keda.Keda`) go through
  ``GetExternalPerPodMetricReplicas``: ``ceil(total / target)``, unless the total over
  ``target x current pods`` is within the tolerance.
* **Behavior** (``horizontal.go``, defaults of ``kubectl explain hpa.spec.behavior``):
  synced every 15 s (``--horizontal-pod-autoscaler-sync-period``); scale-up limited to
  the larger of 4 pods or 100 % per 15 s with no stabilization; scale-down to the
  highest recommendation of the last 300 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation, PoolObservation
from tandem.policy.baselines.base import per_pool
from tandem.policy.config import PoolConfig
from tandem.policy.types import Decision

HpaState = Mapping[str, tuple[tuple[float, int], ...]]


@dataclass(frozen=True)
class HpaBehavior:
    """HPA defaults (``kubectl explain hpa.spec.behavior``)."""

    sync_period_s: float = 15.0
    tolerance: float = 0.1
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    scale_up_pods: int = 4
    scale_up_percent: float = 100.0


def compute_hpa_replicas(current: int, ratio: float, tolerance: float) -> int:
    """The bare HPA formula: ``ceil(current x ratio)``, unchanged within the tolerance.

    >>> compute_hpa_replicas(4, 1.5, 0.1), compute_hpa_replicas(4, 1.05, 0.1)
    (6, 4)
    """
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(current * ratio - 1e-9)


def compute_pod_metric_replicas(
    current: int,
    reported_sum: float,
    reported: int,
    unready: int,
    missing: int,
    target: float,
    tolerance: float,
) -> int:
    """``calcPlainMetricReplicas``: the count for a per-pod metric whose ``reported``
    pods sum to ``reported_sum`` (``unready``: pods not ready yet, ``missing``: ready
    pods with no value), against ``target`` per pod. ``current`` when no pod reported.

    Four ready pods at twice the target and four starting: the ratio is 2, and with the
    starting pods counted as idle it is ``8 / 8 = 1``, within the tolerance, so the pool
    stays at 8 (the bare formula would ask for ``8 x 2 = 16``):

    >>> compute_pod_metric_replicas(8, 4 * 1.4, 4, 4, 0, 0.7, 0.1)
    8
    >>> compute_pod_metric_replicas(4, 4 * 1.4, 4, 0, 0, 0.7, 0.1)
    8
    """
    if reported <= 0:
        return current
    ratio = reported_sum / (reported * target)
    up_with_unready = unready > 0 and ratio > 1.0
    if not up_with_unready and missing == 0:
        if abs(ratio - 1.0) <= tolerance:
            return current
        return math.ceil(ratio * reported - 1e-9)
    total, count = reported_sum, reported
    # Missing pods count as at the target on a scale-down, idle on a scale-up (and not
    # at all at a ratio of exactly 1).
    if missing and ratio < 1.0:
        total += missing * target
        count += missing
    elif missing and ratio > 1.0:
        count += missing
    if up_with_unready:
        count += unready
    new_ratio = total / (count * target)
    if abs(new_ratio - 1.0) <= tolerance or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current
    replicas = math.ceil(new_ratio * count - 1e-9)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


def compute_external_average_replicas(
    current: int, total: float, target: float, tolerance: float
) -> int:
    """``GetExternalPerPodMetricReplicas``: ``ceil(total / target)`` for an
    ``AverageValue`` target, unless ``total / (target x current)`` is within the
    tolerance.

    >>> compute_external_average_replicas(3, 23.0, 5.0, 0.1)
    5
    >>> compute_external_average_replicas(5, 23.0, 5.0, 0.1)
    5
    """
    ratio = total / (target * max(current, 1))
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(total / target - 1e-9)


class Hpa:
    """HPA on a per-pod metric against a target (GPU utilization by default), or with
    ``average_value`` on a pool-wide total against a per-pod target (KEDA's way)."""

    def __init__(
        self,
        pools: Mapping[PoolRole, PoolConfig],
        target: float = 0.7,
        metric: Callable[[PoolObservation], float | None] | None = None,
        behavior: HpaBehavior = HpaBehavior(),
        name: str = "hpa",
        average_value: bool = False,
    ) -> None:
        self.name = name
        self.pools = pools
        self.target = target
        self.metric = metric or (lambda p: p.gpu_utilization)
        self.behavior = behavior
        self.interval_s = behavior.sync_period_s
        self.average_value = average_value

    def initial_state(self) -> HpaState:
        return {}

    def recommend(self, pool: PoolObservation, value: float) -> int:
        """The replica calculator's count before behavior (``value``: the pool mean of a
        per-pod metric, or the total of an ``AverageValue`` one)."""
        tolerance = self.behavior.tolerance
        if self.average_value:
            return compute_external_average_replicas(pool.replicas, value, self.target, tolerance)
        reported = pool.scraped
        return compute_pod_metric_replicas(
            pool.replicas,
            value * reported,
            reported,
            max(pool.replicas - pool.ready, 0),
            len(pool.failed),
            self.target,
            tolerance,
        )

    def decide(self, state: HpaState, obs: Observation) -> tuple[HpaState, Decision]:
        new_state = dict(state)
        b = self.behavior

        def size(role: PoolRole, pool: PoolObservation, cfg: PoolConfig) -> tuple[int, str]:
            value = self.metric(pool)
            current = pool.replicas
            if value is None:
                return current, "metric missing"
            raw = min(max(self.recommend(pool, value), cfg.min_replicas), cfg.max_replicas)
            keep = max(b.scale_up_window_s, b.scale_down_window_s)
            recs = tuple((t, n) for t, n in state.get(role, ()) if t >= obs.now_s - keep)
            recs = (*recs, (obs.now_s, raw))
            new_state[role] = recs
            if raw > current:
                up = min(n for t, n in recs if t >= obs.now_s - b.scale_up_window_s)
                limit = max(
                    current + b.scale_up_pods, math.floor(current * (1 + b.scale_up_percent / 100))
                )
                desired = min(up, limit)
            elif raw < current:
                desired = min(
                    current, max(n for t, n in recs if t >= obs.now_s - b.scale_down_window_s)
                )
            else:
                desired = current
            per = "" if self.average_value else f" per ready pod ({pool.ready} ready)"
            return desired, f"metric {value:.3g}{per} vs target {self.target:g}: {raw}"

        return new_state, per_pool(obs, self.pools, size)
