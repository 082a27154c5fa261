"""The operator's Prometheus metrics: the controller's ``tandem_operator_*`` and the
autoscaler's ``tandem_autoscaler_*``. No I/O.

The autoscaler's series are per InferenceService and pool;
:mod:`tandem.control.autoscale_metrics` sets them each tick and removes a service's series
when it is deleted (and all of them when this replica stops leading). Every one is listed
in ``docs/metrics.md``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from tandem.controller.metrics import ControllerMetrics

#: Labels of every per-pool autoscaler series.
POOL_LABELS = ("namespace", "service", "pool")


class OperatorMetrics(ControllerMetrics):
    """The controller's families and the autoscaler's, on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.desired_replicas = Gauge(
            "tandem_autoscaler_desired_replicas",
            "Replicas the autoscaler last decided for the pool (what it wrote to "
            "deployments/scale).",
            POOL_LABELS,
            registry=r,
        )
        self.max_replicas = Gauge(
            "tandem_autoscaler_max_replicas",
            "The pool's replicas.max.",
            POOL_LABELS,
            registry=r,
        )
        self.metrics_available = Gauge(
            "tandem_autoscaler_metrics_available",
            "1 when the last tick read the pool's signals; 0 when they were missing (the "
            "pool is held at its size).",
            POOL_LABELS,
            registry=r,
        )
        self.decisions = Counter(
            "tandem_autoscaler_decisions",
            "Autoscaler decisions per tick and pool, by direction (up, down, hold) and a "
            "short reason code.",
            (*POOL_LABELS, "direction", "reason"),
            registry=r,
        )
        self.signals = Gauge(
            "tandem_autoscaler_signal",
            "A signal behind the pool's last decision (demand, capacity, utilization, "
            "measured and target latency, ...), in the policy's units.",
            (*POOL_LABELS, "signal"),
            registry=r,
        )
        self.scrape_failures = Counter(
            "tandem_autoscaler_scrape_failures",
            "Pods whose metrics could not be read at a tick (engine pools and router).",
            POOL_LABELS,
            registry=r,
        )
        self.slo_target = Gauge(
            "tandem_autoscaler_slo_target_seconds",
            "A latency target, seconds; le names the router histogram bucket that counts "
            "as fast enough.",
            (*POOL_LABELS, "signal", "class", "le"),
            registry=r,
        )
        self.slo_objective = Gauge(
            "tandem_autoscaler_slo_objective_ratio",
            "The percentile of that latency target as a ratio (p90: 0.9).",
            (*POOL_LABELS, "signal", "class"),
            registry=r,
        )
