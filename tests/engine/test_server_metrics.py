"""``/metrics`` exports vLLM 0.34's names, types, labels and buckets."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tandem.engine.server.metrics import (
    ITL_BUCKETS,
    LAT_BUCKETS,
    TTFT_BUCKETS,
    build_1_2_5_buckets,
)

from .conftest import MODEL_NAME, StartServer

REQUIRED = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:cache_config_info": "gauge",
}


def _buckets(family: object) -> list[float]:
    return [
        float(s.labels["le"])
        for s in family.samples  # type: ignore[attr-defined]
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]


async def test_metric_names_types_labels_and_buckets(start_server: StartServer) -> None:
    client = await start_server()
    for i in range(3):
        body = {"prompt": "tell me a story " * 10, "max_tokens": 5 + i}
        assert (await client.post("/v1/completions", json=body)).status == 200
    resp = await client.get("/metrics")
    assert resp.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    for name, kind in REQUIRED.items():
        assert name in families, name
        assert families[name].type == kind, name
    for name, family in families.items():
        if not name.startswith("vllm:") or name in ("vllm:cache_config_info",):
            continue
        if name == "vllm:admission_rejections":
            continue
        for sample in family.samples:
            assert sample.labels.get("model_name") == MODEL_NAME, sample
            assert sample.labels.get("engine") == "0", sample
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    labels = (("engine", "0"), ("model_name", MODEL_NAME))
    assert samples[("vllm:generation_tokens_total", labels)] == 5 + 6 + 7
    assert samples[("vllm:prompt_tokens_total", labels)] == 3 * 40
    length = tuple(sorted((*labels, ("finished_reason", "length"))))
    assert samples[("vllm:request_success_total", length)] == 3
    assert samples[("vllm:time_to_first_token_seconds_count", labels)] == 3
    assert samples[("vllm:inter_token_latency_seconds_count", labels)] == 4 + 5 + 6
    assert samples[("vllm:prefix_cache_queries_total", labels)] == 120
    assert samples[("vllm:prefix_cache_hits_total", labels)] == 2 * 32  # same prompt, 2 blocks
    assert _buckets(families["vllm:time_to_first_token_seconds"]) == list(TTFT_BUCKETS)
    assert _buckets(families["vllm:inter_token_latency_seconds"]) == list(ITL_BUCKETS)
    assert _buckets(families["vllm:e2e_request_latency_seconds"]) == list(LAT_BUCKETS)
    assert _buckets(families["vllm:request_prompt_tokens"]) == build_1_2_5_buckets(4096)
    info = families["vllm:cache_config_info"].samples[0]
    assert info.labels["block_size"] == "16" and info.labels["num_gpu_blocks"] == "2048"
    assert info.labels["engine"] == "0" and info.value == 1.0


def test_token_buckets_are_1_2_5() -> None:
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]


async def test_openmetrics_on_request(start_server: StartServer) -> None:
    client = await start_server()
    resp = await client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    text = await resp.text()
    assert "vllm_num_requests_waiting{" in text and text.rstrip().endswith("# EOF")


async def test_gauges_follow_the_engine(start_server: StartServer) -> None:
    client = await start_server(speedup=1.0)
    resp = await client.post(
        "/v1/completions", json={"prompt": "x" * 64, "max_tokens": 500, "stream": True}
    )
    await resp.content.readline()
    text = await (await client.get("/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["vllm:num_requests_running"].samples[0].value == 1
    assert families["vllm:kv_cache_usage_perc"].samples[0].value > 0
    resp.close()
