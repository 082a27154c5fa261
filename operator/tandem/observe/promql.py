"""The PromQL the Prometheus source runs, built from the service's labels. Pure.

Series are selected by label: the namespace, the InferenceService and the pool
(``prefill``, ``decode``, ``pool``, or ``router`` for router pods), by default the
``namespace``, ``service`` and ``pool`` labels that the service's PodMonitor and
ServiceMonitor set (``docs/metrics.md``). The label *names* are configurable
(:class:`PromLabels`) for a hand-written scrape configuration that names them otherwise.
Given pod names, a ``pod=~"a|b"`` matcher pins the queries to those pods.

vLLM's series are stored as ``vllm:x`` or ``vllm_x`` depending on the format Prometheus
scraped (OpenMetrics turns colons into underscores), so engine metrics are selected by
``{__name__=~"vllm[:_]x"}``, which finds either spelling.

Every query is keyed by ``(role, signal)``; :mod:`tandem.observe.promresult` turns the
answers into an :class:`~tandem.observe.types.Observation`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from tandem.api.vocab import Component, PoolRole
from tandem.observe.histogram import DEFAULT_PERCENTILES
from tandem.observe.parse import (
    ENGINE_CACHE_INFO,
    ENGINE_CAPACITY_REASON,
    ENGINE_GENERATION_TOKENS,
    ENGINE_ITL,
    ENGINE_KV_USAGE,
    ENGINE_PREEMPTIONS,
    ENGINE_PROMPT_TOKENS,
    ENGINE_REASON_LABEL,
    ENGINE_REQUEST_SUCCESS,
    ENGINE_RUNNING,
    ENGINE_TTFT,
    ENGINE_WAITING,
    ENGINE_WAITING_BY_REASON,
    ROUTER_ABSORBED,
    ROUTER_ABSORBED_TOKENS,
    ROUTER_CLASS_LABEL,
    ROUTER_CODE_LABEL,
    ROUTER_INFEASIBLE,
    ROUTER_ITL,
    ROUTER_QUEUEING,
    ROUTER_REASON_LABEL,
    ROUTER_REQUESTS,
    ROUTER_TTFT,
)

ROUTER_ROLE: Final = "router"
QueryKey = tuple[str, str]
"""``(role, signal)``: ``("decode", "waiting")``, ``("router", "ttft:90")``."""

#: Gauges read per pod: signal → metric.
POD_GAUGES = {"waiting": ENGINE_WAITING, "running": ENGINE_RUNNING, "kv_usage": ENGINE_KV_USAGE}
#: Counters read as per-pod rates: signal → metric.
POD_RATES = {
    "prompt_tokens_per_s": ENGINE_PROMPT_TOKENS,
    "generation_tokens_per_s": ENGINE_GENERATION_TOKENS,
    "preemptions_per_s": ENGINE_PREEMPTIONS,
    "requests_finished_per_s": ENGINE_REQUEST_SUCCESS,
}


@dataclass(frozen=True)
class PromLabels:
    """The label names Tandem's series carry in Prometheus."""

    namespace: str = "namespace"
    """The pod's namespace (set by the Prometheus Operator and by ``kubernetes_sd``)."""
    service: str = "service"
    """The InferenceService's name, relabelled from the pod label
    ``serving.tandem.dev/service`` by the service's ServiceMonitor and PodMonitor
    (``docs/metrics.md``). With ``podTargetLabels`` instead it would be
    ``serving_tandem_dev_service``."""
    pool: str = "pool"
    """The pool: ``prefill``, ``decode``, ``pool`` or ``router``, relabelled from the
    pod label ``serving.tandem.dev/role``."""
    pod: str = "pod"
    """The pod's name (set by the Prometheus Operator and by ``kubernetes_sd``)."""


@dataclass(frozen=True)
class PromTarget:
    """Which series belong to one InferenceService."""

    namespace: str
    service: str
    labels: PromLabels = field(default_factory=PromLabels)
    model_name: str | None = None
    """When set, engine series must carry this ``model_name``."""


def format_range(window_s: float) -> str:
    """A PromQL duration: ``60 → "1m"``, ``90 → "90s"``, ``2.5 → "2500ms"``."""
    if window_s <= 0 or not math.isfinite(window_s):
        raise ValueError(f"range must be a positive number of seconds, got {window_s}")
    if window_s == int(window_s):
        seconds = int(window_s)
        return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"
    return f"{round(window_s * 1000)}ms"


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def build_matchers(target: PromTarget, role: Component, pods: Iterable[str] | None = None) -> str:
    """``namespace="ns",service="chat",pool="decode"`` (+ a ``pod=~`` matcher)."""
    names = target.labels
    parts = [
        f"{names.namespace}={quote(target.namespace)}",
        f"{names.service}={quote(target.service)}",
        f"{names.pool}={quote(role)}",
    ]
    if pods is not None:
        alternatives = "|".join(re.escape(pod) for pod in sorted(pods))
        parts.append(f"{names.pod}=~{quote(alternatives or '^$')}")
    return ",".join(parts)


def build_selector(metric: str, matchers: str) -> str:
    """``tandem_x{m}``, or ``{__name__=~"vllm[:_]x",m}`` for a vLLM metric.

    >>> build_selector("vllm:num_requests_waiting", 'pool="decode"')
    '{__name__=~"vllm[:_]num_requests_waiting",pool="decode"}'
    """
    if metric.startswith("vllm:"):
        pattern = "vllm[:_]" + metric.removeprefix("vllm:")
        return f"{{__name__=~{quote(pattern)},{matchers}}}"
    return f"{metric}{{{matchers}}}"


def build_quantile(q: float, bucket_selector: str, by: Iterable[str], window: str) -> str:
    """``histogram_quantile(q, sum by (le, ...) (rate(<buckets>[window])))``."""
    group = ", ".join(["le", *by])
    return f"histogram_quantile({q:.6g}, sum by ({group}) (rate({bucket_selector}[{window}])))"


def build_mean(metric: str, matchers: str, by: Iterable[str], window: str) -> str:
    """Mean observation of a histogram over the window: rate of its sum over rate of its
    count (NaN, so no value, when nothing was observed)."""
    group = ", ".join(by)
    total = "sum" if not group else f"sum by ({group})"
    sums = f"{total} (rate({build_selector(metric + '_sum', matchers)}[{window}]))"
    counts = f"{total} (rate({build_selector(metric + '_count', matchers)}[{window}]))"
    return f"{sums} / {counts}"


def build_pool_queries(
    target: PromTarget,
    role: PoolRole,
    window_s: float,
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
    pods: Iterable[str] | None = None,
) -> dict[QueryKey, str]:
    """Every query for one engine pool."""
    window = format_range(window_s)
    base = build_matchers(target, role, pods)
    engine = base if target.model_name is None else f"{base},model_name={quote(target.model_name)}"
    pod = target.labels.pod
    out: dict[QueryKey, str] = {(role, "up"): f"up{{{base}}}"}
    for signal, metric in POD_GAUGES.items():
        over_engines = "avg" if signal == "kv_usage" else "sum"
        out[role, signal] = f"{over_engines} by ({pod}) ({build_selector(metric, engine)})"
    # Engines older than vLLM 0.32 lack the split: "or vector(0)" (a series without a pod
    # label, so no pod's value) keeps that from reading as missing data.
    capacity = f"{engine},{ENGINE_REASON_LABEL}={quote(ENGINE_CAPACITY_REASON)}"
    out[role, "waiting_capacity"] = (
        f"sum by ({pod}) ({build_selector(ENGINE_WAITING_BY_REASON, capacity)}) or vector(0)"
    )
    out[role, "kv_info"] = build_selector(ENGINE_CACHE_INFO, base)
    for signal, metric in POD_RATES.items():
        out[role, signal] = f"sum by ({pod}) (rate({build_selector(metric, engine)}[{window}]))"
    for name, metric in (("ttft", ENGINE_TTFT), ("itl", ENGINE_ITL)):
        buckets = build_selector(metric + "_bucket", engine)
        for p in percentiles:
            out[role, f"{name}:{p}"] = build_quantile(p / 100, buckets, (), window)
        out[role, f"{name}:mean"] = build_mean(metric, engine, (), window)
    count = build_selector(ENGINE_TTFT + "_count", engine)
    out[role, "ttft_requests"] = f"sum(increase({count}[{window}]))"
    return out


def build_router_queries(
    target: PromTarget,
    window_s: float,
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
    pods: Iterable[str] | None = None,
) -> dict[QueryKey, str]:
    """Every query for the router pods: latency and requests per priority class."""
    window = format_range(window_s)
    base = build_matchers(target, ROUTER_ROLE, pods)
    cls = ROUTER_CLASS_LABEL
    out: dict[QueryKey, str] = {}
    for name, metric in (("ttft", ROUTER_TTFT), ("itl", ROUTER_ITL)):
        buckets = build_selector(metric + "_bucket", base)
        for p in percentiles:
            out[ROUTER_ROLE, f"{name}:{p}"] = build_quantile(p / 100, buckets, (cls,), window)
        out[ROUTER_ROLE, f"{name}:mean"] = build_mean(metric, base, (cls,), window)
    count = build_selector(ROUTER_TTFT + "_count", base)
    out[ROUTER_ROLE, "ttft_requests"] = f"sum by ({cls}) (increase({count}[{window}]))"
    requests = build_selector(ROUTER_REQUESTS, base)
    out[ROUTER_ROLE, "requests_per_s"] = (
        f"sum by ({cls}, {ROUTER_CODE_LABEL}) (rate({requests}[{window}]))"
    )
    queueing = build_selector(ROUTER_QUEUEING + "_bucket", base)
    for p in percentiles:
        out[ROUTER_ROLE, f"queueing:{p}"] = build_quantile(p / 100, queueing, (cls,), window)
    feasible = build_selector(ROUTER_QUEUEING + "_count", base)
    out[ROUTER_ROLE, "feasible_requests"] = f"sum by ({cls}) (increase({feasible}[{window}]))"
    # Counters that stay without series until their first event: "or vector(0)" keeps
    # them from reading as missing data (a series without labels adds to no class).
    infeasible = build_selector(ROUTER_INFEASIBLE, base)
    out[ROUTER_ROLE, "infeasible"] = (
        f"sum by ({cls}, {ROUTER_REASON_LABEL}) (increase({infeasible}[{window}])) or vector(0)"
    )
    for key, metric in (
        ("absorbed_per_s", ROUTER_ABSORBED),
        ("absorbed_tokens_per_s", ROUTER_ABSORBED_TOKENS),
    ):
        out[ROUTER_ROLE, key] = f"sum(rate({build_selector(metric, base)}[{window}])) or vector(0)"
    return out


def build_queries(
    target: PromTarget,
    roles: Iterable[PoolRole],
    window_s: float,
    percentiles: Iterable[int] = DEFAULT_PERCENTILES,
    pods: Mapping[str, Iterable[str]] | None = None,
    router: bool = True,
) -> dict[QueryKey, str]:
    """The queries of one tick: each engine pool, then (optionally) the router."""
    wanted = tuple(percentiles)
    out: dict[QueryKey, str] = {}
    for role in roles:
        out |= build_pool_queries(target, role, window_s, wanted, (pods or {}).get(role))
    if router:
        out |= build_router_queries(target, window_s, wanted, (pods or {}).get(ROUTER_ROLE))
    return out
