"""The router's Prometheus metrics: the latency users actually see. No I/O of its own.

These are the autoscaler's ground truth, measured where the client is: time to first
token and inter-token latency per priority class, end-to-end latency, the router's own
wait before dispatch, the KV handoff between the legs, retries and rejections; which
requests no pool size could serve in time and, for the others, how much of their
queueing budget they used (:mod:`tandem.policy.feasibility`); and the requests decode
engines absorbed. Each
router app has its own registry, so several routers (tests) live in one process.

``tandem_router_inflight{pool,endpoint}`` is computed from the pools when scraped, so a
removed endpoint disappears from it and dispatch pays nothing to keep it current.
``tandem_router_inter_token_latency_seconds`` is observed once per relayed token, so it is
a :class:`TokenGapHistogram` (a :class:`~tandem.observe.histogram.BucketCounter` per
class, exported when scraped): the client library's ``Histogram.observe`` takes a lock and five
calls, about 0.9 us of the 2-3 us the relay's own work costs a token. The router observes
from its event loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tandem.observe.histogram import INF, BucketCounter
from tandem.router.pools import Pool

#: Fine steps from 5 ms to 10 s (where TTFT targets sit), coarser up to 2 minutes.
LATENCY_BUCKETS_S = (
    0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.25,
    0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0,
    15.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
#: Inter-token latency: 2.5 ms to 1 s, finest around the usual 20-100 ms targets.
ITL_BUCKETS_S = (
    0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05,
    0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
#: End-to-end: seconds to many minutes.
E2E_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1200.0,
)  # fmt: skip
#: Ratios to a budget or a target (1 = exactly on it), finest around 1.
RATIO_BUCKETS = (
    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0,
    2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 20.0, 50.0,
)  # fmt: skip
#: The router's own wait (admission, waiting for a ready engine): 0.1 ms up.
WAIT_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


@dataclass(frozen=True)
class ClassMetrics:
    """The per-class children, looked up once per class instead of once per request."""

    ttft: Histogram
    itl: BucketCounter
    e2e: Histogram
    queue_wait: Histogram
    queueing: Histogram
    target_ratio: Histogram
    absorbed: Counter
    absorbed_tokens: Counter


class RouterMetrics:
    """Every ``tandem_router_*`` metric, in a registry of its own."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, pools: Callable[[], Iterable[Pool]]) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "tandem_router_requests",
            "Requests answered, by priority class and HTTP status (499: client went away; "
            "502: a stream that broke after its 200 status line).",
            ["class", "code"],
            registry=reg,
        )
        self.ttft = Histogram(
            "tandem_router_time_to_first_token_seconds",
            "From request arrival to the first byte of a streaming answer relayed to the client.",
            ["class"],
            buckets=LATENCY_BUCKETS_S,
            registry=reg,
        )
        self.itl = TokenGapHistogram(
            "tandem_router_inter_token_latency_seconds",
            "Gap between consecutive token events of a streaming answer, as relayed.",
            "class",
            ITL_BUCKETS_S,
        )
        reg.register(self.itl)
        self.e2e = Histogram(
            "tandem_router_e2e_latency_seconds",
            "From request arrival to the last byte of the answer.",
            ["class"],
            buckets=E2E_BUCKETS_S,
            registry=reg,
        )
        self.queue_wait = Histogram(
            "tandem_router_queue_wait_seconds",
            "Time inside the router before the first engine request: admission, parsing, "
            "waiting for a ready engine.",
            ["class"],
            buckets=WAIT_BUCKETS_S,
            registry=reg,
        )
        self.kv_handoff = Histogram(
            "tandem_router_kv_handoff_seconds",
            "From the prefill answer to the decode engine's first byte: KV transfer plus "
            "decode admission.",
            buckets=LATENCY_BUCKETS_S,
            registry=reg,
        )
        self.retries = Counter(
            "tandem_router_retries",
            "Retries by leg: prefill (another prefill engine), decode (another decode engine), "
            "fallback (decode-only after prefill failed or handed off no KV).",
            ["leg"],
            registry=reg,
        )
        self.rejections = Counter(
            "tandem_router_rejections",
            "Requests refused by the router's protection, by class and reason.",
            ["class", "reason"],
            registry=reg,
        )
        self.connections_closed = Counter(
            "tandem_router_connections_closed",
            "Client connections the router closed, by reason: header_timeout (no whole "
            "request head in time), idle (keep-alive without a request), client_limit (an "
            "idle one, to make room for a new one of the same address), refused (every "
            "connection of the address was busy).",
            ["reason"],
            registry=reg,
        )
        self.client_connections = Gauge(
            "tandem_router_client_connections",
            "Client connections open.",
            registry=reg,
        )
        self.queueing = Histogram(
            "tandem_router_ttft_queueing_ratio",
            "Requests that could meet their TTFT target at some pool size: the share of "
            "their queueing budget they waited, (TTFT - least TTFT) / (target - least TTFT); "
            "at most 1 when the target was met. The autoscaler sizes prefill on it.",
            ["class"],
            buckets=RATIO_BUCKETS,
            registry=reg,
        )
        self.target_ratio = Histogram(
            "tandem_router_ttft_target_ratio",
            "Every streamed request's TTFT over its own TTFT target (qos.ttft plus "
            "perPromptToken x its prompt tokens); at most 1 when the target was met.",
            ["class"],
            buckets=RATIO_BUCKETS,
            registry=reg,
        )
        self.infeasible = Counter(
            "tandem_router_requests_infeasible",
            "Requests no pool size could serve within their class's target, by reason: "
            "ttft (the prompt's least TTFT is over it), itl (the least ITL seen is over it).",
            ["class", "reason"],
            registry=reg,
        )
        self.absorbed = Counter(
            "tandem_router_absorbed_requests",
            "Requests sent whole to a decode engine, which prefilled them itself, because "
            "the prefill pool's wait would have overrun their TTFT target.",
            ["class"],
            registry=reg,
        )
        self.absorbed_tokens = Counter(
            "tandem_router_absorbed_prompt_tokens",
            "Prompt tokens of the absorbed requests.",
            ["class"],
            registry=reg,
        )
        reg.register(InflightCollector(pools))
        self._classes: dict[str, ClassMetrics] = {}

    def for_class(self, name: str) -> ClassMetrics:
        found = self._classes.get(name)
        if found is None:
            found = ClassMetrics(
                ttft=self.ttft.labels(name),
                itl=self.itl.labels(name),
                e2e=self.e2e.labels(name),
                queue_wait=self.queue_wait.labels(name),
                queueing=self.queueing.labels(name),
                target_ratio=self.target_ratio.labels(name),
                absorbed=self.absorbed.labels(name),
                absorbed_tokens=self.absorbed_tokens.labels(name),
            )
            self._classes[name] = found
        return found

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)


class TokenGapHistogram(Collector):
    """A histogram with one label, exported as the client library's ``Histogram`` is
    (buckets, ``_count``, ``_sum``; no ``_created``), observed without a lock.

    >>> gaps = TokenGapHistogram("gaps_seconds", "Gaps.", "class", (0.01, 0.1))
    >>> child = gaps.labels("batch")
    >>> for v in (0.005, 0.01, 0.05, 3.0):
    ...     child.observe(v)
    >>> [(s.name, s.labels.get("le"), s.value) for s in next(gaps.collect()).samples]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('gaps_seconds_bucket', '0.01', 2.0), ('gaps_seconds_bucket', '0.1', 3.0),
     ('gaps_seconds_bucket', '+Inf', 4.0), ('gaps_seconds_count', None, 4.0),
     ('gaps_seconds_sum', None, 3.065)]
    """

    def __init__(self, name: str, documentation: str, label: str, bounds: Iterable[float]) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.bounds = tuple(bounds)
        self._children: dict[str, BucketCounter] = {}

    def labels(self, value: str) -> BucketCounter:
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = BucketCounter(self.bounds)
        return child

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, child in list(self._children.items()):
            cumulative = child.histogram()
            # le as the library writes it
            buckets = [
                ("+Inf" if bound == INF else repr(float(bound)), count)
                for bound, count in cumulative.buckets
            ]
            family.add_metric([value], buckets, cumulative.sum)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=[self.label])


class InflightCollector(Collector):
    """``tandem_router_inflight{pool,endpoint}``: this router's outstanding requests."""

    def __init__(self, pools: Callable[[], Iterable[Pool]]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "tandem_router_inflight",
            "Requests this router has outstanding on each engine.",
            labels=["pool", "endpoint"],
        )
        for pool in self._pools():
            for endpoint in pool.members():
                family.add_metric([pool.role, endpoint.url], endpoint.outstanding_requests)
        yield family

    def describe(self) -> Iterator[Metric]:
        return iter(())
