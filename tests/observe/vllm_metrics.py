"""A vLLM-shaped ``/metrics`` page built with prometheus_client, as vLLM builds it.

Names, label names and buckets follow vLLM 0.34's ``PrometheusStatLogger``
(``vllm/v1/metrics/loggers.py``): counters are declared without ``_total`` (prometheus_client
adds it), every core metric carries ``model_name`` and ``engine``, and
``vllm:cache_config_info`` carries the cache config as labels.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class VllmMetrics:
    """The engine metrics Tandem reads, for one pod with ``engines`` DP ranks."""

    def __init__(
        self,
        model_name: str = "llama",
        engines: Sequence[str] = ("0",),
        *,
        block_size: int = 16,
        num_gpu_blocks: int | None = 1000,
    ) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.engines = tuple(engines)
        labels = ["model_name", "engine"]
        reg = self.registry
        self.running = Gauge("vllm:num_requests_running", "Running.", labels, registry=reg)
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting.", labels, registry=reg)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV usage.", labels, registry=reg)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt.", labels, registry=reg)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation.", labels, registry=reg
        )
        self.preemptions = Counter("vllm:num_preemptions", "Preemptions.", labels, registry=reg)
        self.success = Counter(
            "vllm:request_success", "Finished.", [*labels, "finished_reason"], registry=reg
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", labels, buckets=TTFT_BUCKETS_S,
            registry=reg,
        )  # fmt: skip
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "ITL.", labels, buckets=ITL_BUCKETS_S,
            registry=reg,
        )  # fmt: skip
        self.waiting_by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason", "By reason.", [*labels, "reason"],
            registry=reg,
        )  # fmt: skip
        info = Gauge(
            "vllm:cache_config_info", "Cache config.",
            ["block_size", "num_gpu_blocks", "gpu_memory_utilization", "engine"], registry=reg,
        )  # fmt: skip
        for engine in self.engines:
            child = (model_name, engine)
            metrics: tuple[Gauge | Counter | Histogram, ...] = (
                self.running, self.waiting, self.kv_usage, self.prompt_tokens,
                self.generation_tokens, self.preemptions, self.ttft, self.itl,
            )  # fmt: skip
            for metric in metrics:
                metric.labels(*child)
            for reason in FINISHED_REASONS:
                self.success.labels(*child, reason)
            for reason in ("capacity", "deferred"):
                self.waiting_by_reason.labels(*child, reason).set(99)
            info.labels(str(block_size), str(num_gpu_blocks), "0.92", engine).set(1)

    def set_gauges(self, engine: str, waiting: float, running: float, kv_usage: float) -> None:
        child = (self.model_name, engine)
        self.waiting.labels(*child).set(waiting)
        self.running.labels(*child).set(running)
        self.kv_usage.labels(*child).set(kv_usage)

    def add_work(
        self,
        engine: str,
        *,
        prompt_tokens: float = 0,
        generation_tokens: float = 0,
        preemptions: float = 0,
        finished: dict[str, float] | None = None,
        ttft_s: Sequence[float] = (),
        itl_s: Sequence[float] = (),
    ) -> None:
        child = (self.model_name, engine)
        self.prompt_tokens.labels(*child).inc(prompt_tokens)
        self.generation_tokens.labels(*child).inc(generation_tokens)
        self.preemptions.labels(*child).inc(preemptions)
        for reason, count in (finished or {}).items():
            self.success.labels(*child, reason).inc(count)
        for value in ttft_s:
            self.ttft.labels(*child).observe(value)
        for value in itl_s:
            self.itl.labels(*child).observe(value)

    def render(self, openmetrics: bool = False) -> str:
        """The page as vLLM serves it: colons in the classic text format, underscores in
        OpenMetrics."""
        if openmetrics:
            page: bytes = generate_openmetrics(self.registry)  # type: ignore[no-untyped-call]
            return page.decode()
        return generate_latest(self.registry).decode()
