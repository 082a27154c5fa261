"""The operator's Prometheus metrics: ``tandem_operator_*`` and ``tandem_autoscaler_*``.
No I/O.

Each operator instance has its own ``CollectorRegistry`` (two operators in one process,
as in the HA tests, never share counters). Served by :mod:`tandem.control.http`. The
autoscaler's series are per InferenceService and pool; :mod:`tandem.control.autoscale_metrics`
sets them each tick and removes a service's series when it is deleted (and all of them
when this replica stops leading). Every one is listed in ``docs/metrics.md``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Reconcile durations, seconds: a no-op reconcile takes milliseconds, a first one with
#: a dozen writes tens of milliseconds, a throttled API server seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: Labels of every per-pool autoscaler series.
POOL_LABELS = ("namespace", "service", "pool")
_VERB = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def parse_path(path: str) -> tuple[str, bool]:
    """(``plural[/subresource]``, whether a named object) of an API path.

    >>> parse_path("/apis/apps/v1/namespaces/ns/deployments/web/scale")
    ('deployments/scale', True)
    >>> parse_path("/api/v1/namespaces/ns/events")
    ('events', False)
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return "unknown", False
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    return resource, len(rest) > 1


class OperatorMetrics:
    """Counters, gauges and histograms of one operator."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "tandem_operator_reconciles",
            "Reconciles of InferenceServices by result (success, invalid, error, skipped).",
            ["result"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "tandem_operator_reconcile_duration_seconds",
            "Time one reconcile took.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.managed_services = Gauge(
            "tandem_operator_managed_services",
            "InferenceServices this operator manages.",
            registry=r,
        )
        self.child_writes = Counter(
            "tandem_operator_child_writes",
            "Writes to child objects by kind and verb (create, patch, delete).",
            ["kind", "verb"],
            registry=r,
        )
        self.status_writes = Counter(
            "tandem_operator_status_writes",
            "Writes of InferenceService status by the reconciler.",
            registry=r,
        )
        self.api_errors = Counter(
            "tandem_operator_api_errors",
            "Failed Kubernetes API requests by verb, resource and HTTP status (0: no answer).",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.events = Counter(
            "tandem_operator_events",
            "Kubernetes Events posted, by type and reason.",
            ["type", "reason"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "tandem_operator_queue_depth", "InferenceServices waiting to be reconciled.", registry=r
        )
        self.leader = Gauge(
            "tandem_operator_leader", "1 while this replica holds the leader lease.", registry=r
        )
        self.tick_errors = Counter(
            "tandem_operator_tick_errors",
            "Failed periodic ticks by ticker.",
            ["ticker"],
            registry=r,
        )

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

    def observe_request(self, method: str, path: str, status: int) -> None:
        """A :data:`tandem.kube.RequestObserver`: counts failed API requests."""
        if 200 <= status < 300:
            return
        resource, named = parse_path(path)
        verb = _VERB.get(method.upper(), method.lower())
        if verb == "get" and not named:
            verb = "list"
        self.api_errors.labels(verb, resource, str(status)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
