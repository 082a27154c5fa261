"""The controller's Prometheus metrics: ``tandem_operator_*``. No I/O.

Reconciles, writes, API errors, Events, the work queue, leadership and ticks: what any
controller built on this package counts. Each operator instance has its own
``CollectorRegistry`` (two operators in one process, as in the HA tests, never share
counters); served by :mod:`tandem.controller.http`. Tandem's autoscaler adds its
families on the same registry (:class:`tandem.control.metrics.OperatorMetrics`). Every
one is listed in ``docs/metrics.md``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Reconcile durations, seconds: a no-op reconcile takes milliseconds, a first one with
#: a dozen writes tens of milliseconds, a throttled API server seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
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


class ControllerMetrics:
    """Counters, gauges and histograms of one controller."""

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
        self.events_dropped = Counter(
            "tandem_operator_events_dropped",
            "Events not posted, by why: rejected (the API refused it), overflow (too many "
            "kept during an outage), stopped (the operator stopped with no spool).",
            ["why"],
            registry=r,
        )
        self.api_outages = Counter(
            "tandem_operator_api_outages",
            "Outages of the API server (no answer, 429 or 5xx) of at least the report "
            "threshold, counted when it answers again.",
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
