"""vLLM 0.34's Prometheus metrics for the simulated engine (prometheus_client). No I/O.

Names, types, labels (``model_name``, ``engine``) and bucket lists follow vLLM's
``PrometheusStatLogger``; counters are declared without ``_total`` so prometheus_client adds
it on export, as vLLM's are. Each app owns a registry, so several engines can share a process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tandem.engine.model import EngineStats, FinishedRequest, IterationResult

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LAT_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return out
            out.append(value)
        exponent += 1


class EngineMetrics:
    """The engine's metric objects with their label values bound once."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        cache_info: dict[str, str],
        role: str,
        engine: str = "0",
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        names = ["model_name", "engine"]
        lv = (model_name, engine)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, [*names, *extra], registry=reg)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*names, *extra], registry=reg)

        def hist(name: str, doc: str, buckets: tuple[float, ...] | list[int]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=reg)

        self.running = gauge("vllm:num_requests_running", "Requests in model execution").labels(*lv)
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting").labels(*lv)
        by_reason = gauge("vllm:num_requests_waiting_by_reason", "Waiting by reason", ("reason",))
        self.waiting_capacity = by_reason.labels(*lv, "capacity")
        self.waiting_deferred = by_reason.labels(*lv, "deferred")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%").labels(*lv)
        sleep = gauge("vllm:engine_sleep_state", "Engine sleep state", ("sleep_state",))
        sleep.labels(*lv, "awake").set(1)
        sleep.labels(*lv, "weights_offloaded").set(0)
        sleep.labels(*lv, "discard_all").set(0)
        self.kv_fetch: dict[str, Gauge] = {}
        if role == "decode":
            fetch = gauge("vllm:num_requests_kv_fetch_by_stage", "KV fetch stage", ("stage",))
            for stage in ("waiting_to_start", "in_progress", "completed_waiting"):
                self.kv_fetch[stage] = fetch.labels(*lv, stage)
        info = Gauge(
            "vllm:cache_config_info", "Cache config", [*sorted(cache_info), "engine"], registry=reg
        )
        info.labels(*[cache_info[k] for k in sorted(cache_info)], engine).set(1)

        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix queries").labels(*lv)
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix hits").labels(*lv)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens").labels(*lv)
        by_source = counter("vllm:prompt_tokens_by_source", "Prompt tokens", ("source",))
        self.prompt_local = by_source.labels(*lv, "local_compute")
        self.prompt_cached = by_source.labels(*lv, "local_cache_hit")
        self.prompt_external = by_source.labels(*lv, "external_kv_transfer")
        self.generation_tokens = counter("vllm:generation_tokens", "Generation tokens").labels(*lv)
        self.preemptions = counter("vllm:num_preemptions", "Preemptions").labels(*lv)
        success = counter("vllm:request_success", "Finished requests", ("finished_reason",))
        self.success = {
            r: success.labels(*lv, r) for r in ("stop", "length", "abort", "error", "repetition")
        }
        self.rejections = Counter(
            "vllm:admission_rejections",
            "Admission rejections",
            ["model_name", "reason"],
            registry=reg,
        )
        self._model_name = model_name
        # as vLLM: the NIXL series exist on engines with a KV connector only
        nixl = reg if role != "aggregated" else CollectorRegistry(auto_describe=True)
        self.kv_failed = Counter(
            "vllm:nixl_num_failed_transfers", "Failed KV loads", names, registry=nixl
        ).labels(*lv)
        self.kv_expired = Counter(
            "vllm:nixl_num_kv_expired_reqs", "Expired KV leases", names, registry=nixl
        ).labels(*lv)

        self.ttft = hist("vllm:time_to_first_token_seconds", "TTFT", TTFT_BUCKETS).labels(*lv)
        self.itl = hist("vllm:inter_token_latency_seconds", "ITL", ITL_BUCKETS).labels(*lv)
        self.tpot = hist("vllm:request_time_per_output_token_seconds", "TPOT", ITL_BUCKETS).labels(
            *lv
        )
        self.e2e = hist("vllm:e2e_request_latency_seconds", "E2E", LAT_BUCKETS).labels(*lv)
        self.queue = hist("vllm:request_queue_time_seconds", "Queue", LAT_BUCKETS).labels(*lv)
        self.inference = hist(
            "vllm:request_inference_time_seconds", "Inference", LAT_BUCKETS
        ).labels(*lv)
        self.prefill = hist("vllm:request_prefill_time_seconds", "Prefill", LAT_BUCKETS).labels(*lv)
        self.decode = hist("vllm:request_decode_time_seconds", "Decode", LAT_BUCKETS).labels(*lv)
        tok = build_1_2_5_buckets(max_model_len)
        self.req_prompt = hist("vllm:request_prompt_tokens", "Prompt tokens", tok).labels(*lv)
        self.req_gen = hist("vllm:request_generation_tokens", "Output tokens", tok).labels(*lv)
        self.req_max_gen = hist(
            "vllm:request_max_num_generation_tokens", "Max output tokens", tok
        ).labels(*lv)
        self.req_max_tokens = hist("vllm:request_params_max_tokens", "max_tokens", tok).labels(*lv)
        self.req_n = hist("vllm:request_params_n", "n", N_BUCKETS).labels(*lv)
        self.req_preempt = hist(
            "vllm:request_num_preemptions", "Preemptions per request", PREEMPTION_BUCKETS
        ).labels(*lv)
        self.iteration_tokens = hist(
            "vllm:iteration_tokens_total", "Tokens per iteration", ITERATION_TOKEN_BUCKETS
        ).labels(*lv)

    def on_iteration(
        self, result: IterationResult, preemptions: int, generated: int | None = None
    ) -> None:
        """``generated``: tokens delivered (default: every token the iteration emitted)."""
        self.generation_tokens.inc(len(result.emitted) if generated is None else generated)
        self.iteration_tokens.observe(result.num_prefill_tokens + result.num_decode_tokens)
        if preemptions:
            self.preemptions.inc(preemptions)
        if result.kv_expired:
            self.kv_expired.inc(len(result.kv_expired))

    def on_finished(self, fin: FinishedRequest) -> None:
        self.success[fin.finish_reason].inc()
        if fin.finish_reason in ("abort", "error") and fin.first_token_s is None:
            return
        self.e2e.observe(fin.e2e_s)
        self.queue.observe(fin.queue_s)
        self.inference.observe(fin.inference_s)
        self.prefill.observe(fin.prefill_s)
        self.decode.observe(fin.decode_s)
        tpot = fin.tpot_s
        if tpot is not None:
            self.tpot.observe(tpot)
        self.req_prompt.observe(fin.prompt_tokens)
        self.req_gen.observe(fin.output_tokens)
        self.req_max_gen.observe(fin.max_tokens)
        self.req_max_tokens.observe(fin.max_tokens)
        self.req_n.observe(1)
        self.req_preempt.observe(fin.num_preemptions)

    def on_rejected(self, reason: str) -> None:
        self.rejections.labels(self._model_name, reason).inc()

    def refresh(self, stats: EngineStats, prev: EngineStats | None) -> None:
        """Set gauges and catch counters up from an engine snapshot (called per scrape)."""
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.waiting_capacity.set(stats.num_waiting_for_capacity)
        self.waiting_deferred.set(stats.num_waiting - stats.num_waiting_for_capacity)
        self.kv_usage.set(stats.kv_usage)
        if self.kv_fetch:
            in_progress = stats.num_kv_transferring
            self.kv_fetch["in_progress"].set(in_progress)
            self.kv_fetch["waiting_to_start"].set(stats.num_waiting_for_kv - in_progress)
        p = prev
        self.prefix_queries.inc(
            stats.prefix_cache_queries_total - (p.prefix_cache_queries_total if p else 0)
        )
        self.prefix_hits.inc(
            stats.prefix_cache_hits_total - (p.prefix_cache_hits_total if p else 0)
        )
        self.prompt_tokens.inc(stats.prompt_tokens_total - (p.prompt_tokens_total if p else 0))
        self.prompt_local.inc(
            stats.prompt_tokens_local_compute_total
            - (p.prompt_tokens_local_compute_total if p else 0)
        )
        self.prompt_cached.inc(
            stats.prompt_tokens_cache_hit_total - (p.prompt_tokens_cache_hit_total if p else 0)
        )
        self.prompt_external.inc(
            stats.prompt_tokens_external_total - (p.prompt_tokens_external_total if p else 0)
        )
        self.kv_failed.inc(stats.kv_load_failures_total - (p.kv_load_failures_total if p else 0))
