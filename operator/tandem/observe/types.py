"""Frozen observations the autoscaler policy consumes. Pure.

One :class:`Observation` per tick: for each pool a :class:`PoolObservation` (sums and
rates over the pods that answered, plus which pods did not), and the latency users
felt, per priority class, from the router's histograms (or the engines' when no router
series exist). Rates are per second over the window between two scrapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.api.vocab import PoolRole


@dataclass(frozen=True)
class LatencyObservation:
    """Latency percentiles over the last window, in seconds, and how many samples."""

    ttft_s: Mapping[int, float] = field(default_factory=dict)
    """TTFT by percentile (50, 90, 95, 99) over the window."""
    itl_s: Mapping[int, float] = field(default_factory=dict)
    """Inter-token latency by percentile over the window."""
    requests: float = 0.0
    """Requests that finished their first token in the window (TTFT samples)."""
    ttft_mean_s: float | None = None
    """Mean TTFT over the window (the histogram's sum over its count); ``None`` without
    samples. Exact, unlike the percentiles, which interpolate inside buckets."""
    itl_mean_s: float | None = None
    """Mean inter-token latency over the window; ``None`` without samples."""
    source: str = "router"
    """``router`` (what users feel) or ``engine`` (fallback)."""
    requests_per_s: float | None = None
    """Requests answered per second (router ``tandem_router_requests_total``, any code);
    ``None`` from engine histograms."""
    error_requests_per_s: float | None = None
    """Of those, answered with a 5xx status."""
    queueing_ratio: Mapping[int, float] = field(default_factory=dict)
    """By percentile, the share of its queueing budget a request that could meet its TTFT
    target used (``(ttft - least) / (target - least)``, :mod:`tandem.policy.feasibility`):
    at most 1 when it met the target; only delay more replicas remove."""
    feasible_requests: float | None = None
    """Requests of the window that could meet their TTFT target at some pool size (the
    samples of ``queueing_ratio``); ``None`` when the router does not judge feasibility
    (engine histograms)."""
    infeasible_requests: Mapping[str, float] = field(default_factory=dict)
    """Requests of the window no pool size could serve within target, by reason (``ttft``,
    ``itl``)."""


@dataclass(frozen=True)
class PodObservation:
    """One engine pod's gauges at this tick, for picking which pods to remove."""

    waiting_requests: float = 0.0
    running_requests: float = 0.0
    kv_usage: float = 0.0
    """``vllm:kv_cache_usage_perc`` (0-1), mean over the pod's engines."""


def sum_known(values: list[float | None]) -> float | None:
    """The sum, or ``None`` if any value (or every one: an empty list) is unknown.

    >>> sum_known([1.0, 2.0]), sum_known([1.0, None]), sum_known([])
    (3.0, None, None)
    """
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


@dataclass(frozen=True)
class PoolObservation:
    """One pool at one tick. Gauges are summed over the pods that answered."""

    role: PoolRole
    """``prefill``, ``decode`` or ``pool``."""
    replicas: int
    """Pods the Deployment has now (ready or starting)."""
    ready: int
    """Pods that are ready."""
    scraped: int
    """Pods whose metrics were read this tick."""
    failed: Mapping[str, str] = field(default_factory=dict)
    """Pod name → error, for pods that were expected to answer and did not."""
    waiting_requests: float = 0.0
    """Sum of ``vllm:num_requests_waiting``."""
    waiting_for_capacity: float | None = None
    """Of those, the requests waiting for room in a batch or the KV cache (sum of
    ``vllm:num_requests_waiting_by_reason{reason="capacity"}``); a decode engine's
    requests pulling their KV are waiting too, but not for capacity. ``None`` when some
    answering pod does not export it."""
    running_requests: float = 0.0
    """Sum of ``vllm:num_requests_running``."""
    kv_usage: float = 0.0
    """Mean ``vllm:kv_cache_usage_perc`` over answering pods (0-1)."""
    kv_usage_max: float = 0.0
    """Highest ``vllm:kv_cache_usage_perc`` of one pod (0-1)."""
    kv_capacity_tokens: float | None = None
    """KV-cache tokens of one replica (``num_gpu_blocks × block_size`` of
    ``vllm:cache_config_info``), when the engine reports it."""
    prompt_tokens_per_s: float = 0.0
    """Rate of ``vllm:prompt_tokens_total`` (prompt tokens processed)."""
    generation_tokens_per_s: float = 0.0
    """Rate of ``vllm:generation_tokens_total``."""
    preemptions_per_s: float = 0.0
    """Rate of ``vllm:num_preemptions_total``."""
    requests_finished_per_s: float = 0.0
    """Rate of ``vllm:request_success_total`` (all finish reasons)."""
    latency: LatencyObservation | None = None
    """The engines' own latency over the window (fallback when the router has none)."""
    gpu_utilization: float | None = None
    """Mean fraction of the window the pool's GPUs were busy (what DCGM's
    ``DCGM_FI_DEV_GPU_UTIL`` reports), when known; only the HPA baseline uses it."""
    rated: int = 0
    """Pods whose counters contributed to the rates (read at this tick and an earlier
    one); a pod seen for the first time adds to the gauges but not yet to the rates."""
    pods: Mapping[str, PodObservation] = field(default_factory=dict)
    """Per-pod gauges of the pods that answered."""

    @property
    def available(self) -> bool:
        """Whether the pool's signals can be trusted this tick: some pod answered and
        every ready pod did."""
        return not self.failed and self.scraped > 0 and self.scraped >= self.ready

    @property
    def rates_available(self) -> bool:
        """Whether the rates cover every pod that answered (false on a first scrape)."""
        return self.available and self.rated >= self.scraped


@dataclass(frozen=True)
class Observation:
    """Everything the policy sees at ``now_s`` (seconds on the driver's clock)."""

    now_s: float
    window_s: float
    """Seconds since the previous scrape: the window of every rate and percentile."""
    pools: Mapping[PoolRole, PoolObservation]
    latency_by_class: Mapping[str, LatencyObservation] = field(default_factory=dict)
    """Router-measured latency per priority class (``default`` without classes)."""
    arrival_prompt_tokens_per_s: float | None = None
    """Prompt tokens/s arriving at the router, when it reports them."""
    absorbed_requests_per_s: float = 0.0
    """Requests/s the router sent whole to a decode engine, which prefilled them itself,
    because the prefill pool's wait would have overrun their TTFT target."""
    absorbed_prompt_tokens_per_s: float = 0.0
    """Their prompt tokens/s: prefill work the prefill pool did not see."""
    errors: tuple[str, ...] = ()
    """Problems reading the router or the metrics source, for status."""
    empty_queries: tuple[str, ...] = ()
    """PromQL that returned no series (Prometheus source only), for status."""
