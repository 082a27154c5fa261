"""Prometheus HTTP API answers → one :class:`Observation`. Pure.

:func:`parse_query_response` reads the JSON of ``/api/v1/query``;
:func:`compute_prometheus_observation` assembles the answers to the queries of
:mod:`tandem.observe.promql` into the same observation the pod scraper produces.

A query that returns no series is not an error by itself (a router that never served
a request has no per-class series yet) but is reported with its PromQL in
``Observation.empty_queries`` and summarised in ``errors``, so status shows what to
check. A pool whose gauges have no series has ``scraped == 0`` and is therefore not
``available``: missing data holds the pool's size instead of reading as zero load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api.vocab import Component, PoolRole
from tandem.observe.compute import compute_engine_fallback
from tandem.observe.histogram import DEFAULT_PERCENTILES
from tandem.observe.parse import ROUTER_CLASS_LABEL, ROUTER_CODE_LABEL, ROUTER_REASON_LABEL
from tandem.observe.promql import POD_GAUGES, POD_RATES, ROUTER_ROLE, PromLabels, QueryKey
from tandem.observe.types import (
    LatencyObservation,
    Observation,
    PodObservation,
    PoolObservation,
    sum_known,
)

Vector = list[tuple[dict[str, str], float]]
"""An instant vector: ``(labels, value)`` per series."""
Lookup = Callable[[QueryKey], Vector]


class PrometheusQueryError(Exception):
    """Prometheus refused or failed a query; the message says why."""


@dataclass(frozen=True)
class PoolSize:
    """A pool's replica counts, as the Deployment reports them."""

    replicas: int
    ready: int
    pods: tuple[str, ...] = ()
    """Pods that should have series (the ready ones); each one without is reported in
    ``failed``. Empty: whichever pods Prometheus has."""


#: The ``errorType`` values of Prometheus's HTTP API.
ERROR_TYPES = frozenset(
    {"bad_data", "execution", "timeout", "canceled", "internal", "unavailable", "not_found"}
)


def parse_query_response(payload: Any) -> Vector:
    """The series of an ``/api/v1/query`` answer; raises :class:`PrometheusQueryError`."""
    if not isinstance(payload, dict):
        raise PrometheusQueryError(f"not a Prometheus API answer (a JSON {type(payload).__name__})")
    if payload.get("status") != "success":
        # Only Prometheus's own error vocabulary: nothing of an answer's free text reaches
        # status or Events (a URL that is not Prometheus could put anything there).
        kind = payload.get("errorType")
        raise PrometheusQueryError(
            f"query failed: {kind}" if kind in ERROR_TYPES else "query failed (no known errorType)"
        )
    try:
        data = payload["data"]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise PrometheusQueryError(f"expected an instant vector, got {data['resultType']}")
        return [
            ({str(k): str(v) for k, v in item["metric"].items()}, float(item["value"][1]))
            for item in data["result"]
        ]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise PrometheusQueryError(f"malformed answer ({type(err).__name__})") from None


def compute_prometheus_observation(
    now_s: float,
    window_s: float,
    pools: Mapping[PoolRole, PoolSize],
    queries: Mapping[QueryKey, str],
    results: Mapping[QueryKey, Vector | Exception],
    labels: PromLabels | None = None,
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
) -> Observation:
    """The observation from every query's answer (or the error fetching it)."""
    pod_label = (labels or PromLabels()).pod
    wanted = tuple(percentiles)
    errors, empty = _problems(queries, results)

    def vector(key: QueryKey) -> Vector:
        found = results.get(key)
        return [] if found is None or isinstance(found, Exception) else found

    pool_obs = {role: _pool(role, size, vector, pod_label, wanted) for role, size in pools.items()}
    latency = _router_latency(vector, wanted) or compute_engine_fallback(pool_obs)
    return Observation(
        now_s=now_s,
        window_s=window_s,
        pools=pool_obs,
        latency_by_class=latency,
        errors=errors,
        empty_queries=empty,
        absorbed_requests_per_s=_total(vector((ROUTER_ROLE, "absorbed_per_s"))),
        absorbed_prompt_tokens_per_s=_total(vector((ROUTER_ROLE, "absorbed_tokens_per_s"))),
    )


def _total(series: Vector) -> float:
    return sum(value for _, value in series if math.isfinite(value))


def _problems(
    queries: Mapping[QueryKey, str], results: Mapping[QueryKey, Vector | Exception]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Failed queries grouped by error, and a summary of empty ones per role, for status;
    plus the PromQL of every empty query."""
    failed: dict[str, list[QueryKey]] = {}
    empty: dict[str, list[QueryKey]] = {}
    for key in queries:
        found = results.get(key)
        if found is None or isinstance(found, Exception):
            failed.setdefault(str(found) if found is not None else "not run", []).append(key)
        elif not found:
            empty.setdefault(key[0], []).append(key)
    errors = [
        f"{len(keys)} of {len(queries)} queries failed: {message} (e.g. {queries[keys[0]]})"
        for message, keys in failed.items()
    ]
    for role, keys in empty.items():
        total = sum(1 for key in queries if key[0] == role)
        errors.append(
            f"{role}: {len(keys)} of {total} queries returned no series, e.g. {queries[keys[0]]}"
        )
    return tuple(errors), tuple(queries[key] for keys in empty.values() for key in keys)


def _by_label(series: Vector, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in series:
        if math.isfinite(value) and label in labels:
            out[labels[label]] = out.get(labels[label], 0.0) + value
    return out


def _pool(
    role: PoolRole, size: PoolSize, vector: Lookup, pod_label: str, percentiles: tuple[int, ...]
) -> PoolObservation:
    gauges = {signal: _by_label(vector((role, signal)), pod_label) for signal in POD_GAUGES}
    failed = {
        labels[pod_label]: "Prometheus reports the target down (up == 0)"
        for labels, value in vector((role, "up"))
        if value == 0 and pod_label in labels
    }
    pods: dict[str, PodObservation] = {}
    for pod in size.pods:
        if all(pod not in values for values in gauges.values()):
            failed.setdefault(pod, "no series in Prometheus for this pod (not scraped yet?)")
    for pod in sorted(set().union(*gauges.values())):
        lacking = [POD_GAUGES[s] for s, values in gauges.items() if pod not in values]
        if lacking:
            failed.setdefault(pod, f"no series in Prometheus for {', '.join(lacking)}")
        elif pod not in failed:
            pods[pod] = PodObservation(
                gauges["waiting"][pod], gauges["running"][pod], gauges["kv_usage"][pod]
            )
    rates = {signal: _by_label(vector((role, signal)), pod_label) for signal in POD_RATES}
    for_capacity = _by_label(vector((role, "waiting_capacity")), pod_label)
    capacities = _kv_capacity_by_pod(vector((role, "kv_info")), pod_label)
    kv = [p.kv_usage for p in pods.values()]
    return PoolObservation(
        role=role,
        replicas=size.replicas,
        ready=size.ready,
        scraped=len(pods),
        failed=failed,
        waiting_requests=sum(p.waiting_requests for p in pods.values()),
        waiting_for_capacity=sum_known([for_capacity.get(pod) for pod in pods]),
        running_requests=sum(p.running_requests for p in pods.values()),
        kv_usage=sum(kv) / len(kv) if kv else 0.0,
        kv_usage_max=max(kv, default=0.0),
        kv_capacity_tokens=sum(capacities.values()) / len(capacities) if capacities else None,
        prompt_tokens_per_s=sum(rates["prompt_tokens_per_s"].values()),
        generation_tokens_per_s=sum(rates["generation_tokens_per_s"].values()),
        preemptions_per_s=sum(rates["preemptions_per_s"].values()),
        requests_finished_per_s=sum(rates["requests_finished_per_s"].values()),
        latency=_engine_latency(role, vector, percentiles),
        rated=len(set(rates["prompt_tokens_per_s"]) & set(pods)),
        pods=pods,
    )


def _kv_capacity_by_pod(info: Vector, pod_label: str) -> dict[str, float]:
    per_engine: dict[tuple[str, str], float] = {}
    for labels, _ in info:
        try:
            tokens = float(labels["num_gpu_blocks"]) * float(labels["block_size"])
        except (KeyError, ValueError):
            continue
        if tokens > 0 and math.isfinite(tokens) and pod_label in labels:
            per_engine[labels[pod_label], labels.get("engine", "")] = tokens
    out: dict[str, float] = {}
    for (pod, _), tokens in per_engine.items():
        out[pod] = out.get(pod, 0.0) + tokens
    return out


def _percentiles(
    vector: Lookup, role: Component, name: str, percentiles: tuple[int, ...]
) -> dict[str, dict[int, float]]:
    """Class (``""`` for engines) → percentile → value, skipping NaN (no samples)."""
    out: dict[str, dict[int, float]] = {}
    for p in percentiles:
        for labels, value in vector((role, f"{name}:{p}")):
            found = out.setdefault(labels.get(ROUTER_CLASS_LABEL, ""), {})
            if math.isfinite(value):
                found[p] = value
    return out


def _means(vector: Lookup, role: Component, name: str) -> dict[str, float]:
    """Class (``""`` for engines) → the window's mean of ``name`` (``ttft``/``itl``)."""
    out: dict[str, float] = {}
    for labels, value in vector((role, f"{name}:mean")):
        if math.isfinite(value):
            out[labels.get(ROUTER_CLASS_LABEL, "")] = value
    return out


def _engine_latency(
    role: PoolRole, vector: Lookup, percentiles: tuple[int, ...]
) -> LatencyObservation | None:
    requests = vector((role, "ttft_requests"))
    if not requests:
        return None
    return LatencyObservation(
        ttft_s=_percentiles(vector, role, "ttft", percentiles).get("", {}),
        itl_s=_percentiles(vector, role, "itl", percentiles).get("", {}),
        requests=sum(v for _, v in requests if math.isfinite(v)),
        source="engine",
        ttft_mean_s=_means(vector, role, "ttft").get(""),
        itl_mean_s=_means(vector, role, "itl").get(""),
    )


def _router_latency(vector: Lookup, percentiles: tuple[int, ...]) -> dict[str, LatencyObservation]:
    ttft = _percentiles(vector, ROUTER_ROLE, "ttft", percentiles)
    itl = _percentiles(vector, ROUTER_ROLE, "itl", percentiles)
    counts = _by_label(vector((ROUTER_ROLE, "ttft_requests")), ROUTER_CLASS_LABEL)
    ttft_mean = _means(vector, ROUTER_ROLE, "ttft")
    itl_mean = _means(vector, ROUTER_ROLE, "itl")
    requests: dict[str, float] = {}
    errors: dict[str, float] = {}
    for labels, value in vector((ROUTER_ROLE, "requests_per_s")):
        cls = labels.get(ROUTER_CLASS_LABEL)
        if cls is None or not math.isfinite(value):
            continue
        requests[cls] = requests.get(cls, 0.0) + value
        if labels.get(ROUTER_CODE_LABEL, "").startswith("5"):
            errors[cls] = errors.get(cls, 0.0) + value
    queueing = _percentiles(vector, ROUTER_ROLE, "queueing", percentiles)
    feasible = _by_label(vector((ROUTER_ROLE, "feasible_requests")), ROUTER_CLASS_LABEL)
    infeasible: dict[str, dict[str, float]] = {}
    for labels, value in vector((ROUTER_ROLE, "infeasible")):
        cls, reason = labels.get(ROUTER_CLASS_LABEL), labels.get(ROUTER_REASON_LABEL)
        if cls is not None and reason is not None and math.isfinite(value) and value > 0:
            found = infeasible.setdefault(cls, {})
            found[reason] = found.get(reason, 0.0) + value
    classes = sorted((set(counts) | set(requests) | set(ttft) | set(itl)) - {""})
    return {
        cls: LatencyObservation(
            ttft_s=ttft.get(cls, {}),
            itl_s=itl.get(cls, {}),
            requests=counts.get(cls, 0.0),
            source="router",
            requests_per_s=requests.get(cls, 0.0),
            error_requests_per_s=errors.get(cls, 0.0),
            ttft_mean_s=ttft_mean.get(cls),
            itl_mean_s=itl_mean.get(cls),
            queueing_ratio=queueing.get(cls, {}),
            feasible_requests=feasible.get(cls),
            infeasible_requests=infeasible.get(cls, {}),
        )
        for cls in classes
    }
