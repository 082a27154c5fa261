"""Every ``vllm:`` series Tandem reads, on both engines: name, type and labels.

The names are not listed here by hand: they are collected from what reads them — the
autoscaler's parser (``tandem.observe.parse``), the router's (``router/engine_metrics.py``)
and the alerts and dashboard of the chart — so a new reader is held to the contract the
day it is written. Then the readers themselves parse each engine's page.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tandem.observe import parse as observe_parse
from tandem.observe.parse import parse_engine_sample
from tandem.router import engine_metrics
from tandem.router.engine_metrics import parse_engine_gauges
from tests.contract.fleet import Engine
from tests.contract.http import call, completion_body, metrics_of
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]
CHART_FILES = ("charts/tandem/files/alerts.yaml", "charts/tandem/files/dashboard.json",
               "charts/tandem/templates/prometheusrule.yaml")  # fmt: skip


def names_tandem_reads() -> set[str]:
    """Family names (``vllm:x``, counters without ``_total``) from every reader."""
    found = {v for k, v in vars(observe_parse).items() if k.startswith("ENGINE_")
             and isinstance(v, str) and v.startswith("vllm:")}  # fmt: skip
    found |= {f"vllm:{n}" for n in engine_metrics._WANTED}
    for rel in CHART_FILES:
        text = (REPO / rel).read_text()
        found |= {"vllm:" + m for m in re.findall(r"vllm(?:\[:_\]|:)([a-z_]+[a-z])", text)}
    return {n.removesuffix("_total") for n in found}


#: the Prometheus type of each family a reader may name
TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
}
#: labels beyond ``model_name`` and ``engine``, with the values a reader may select
LABEL_VALUES = {
    "vllm:num_requests_waiting_by_reason": ("reason", {"capacity", "deferred"}),
    "vllm:request_success": ("finished_reason", {"stop", "length", "abort", "error"}),
    "vllm:prompt_tokens_by_source": ("source", {"local_compute", "local_cache_hit",
                                                "external_kv_transfer"}),
}  # fmt: skip


def test_every_name_tandem_reads_has_a_type_here() -> None:
    read = names_tandem_reads()
    assert {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= read
    assert read <= set(TYPES), f"a reader names {sorted(read - set(TYPES))}: add it to TYPES"


async def page_after_a_request(engine: Engine) -> str:
    answer = await call(engine, "/v1/completions", completion_body(max_tokens=3))
    assert answer.status == 200
    return await metrics_of(engine)


async def test_the_series_tandem_reads(aggregated: Engine) -> None:
    text = await page_after_a_request(aggregated)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in sorted(names_tandem_reads() | set(TYPES)):
        assert name in families, f"{name} missing"
        family = families[name]
        assert family.type == TYPES[name], (name, family.type)
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        assert samples, f"{name} has no sample"
        for sample in samples:
            assert sample.labels.get("engine") == "0", (name, sample.labels)
            if name != "vllm:cache_config_info":
                assert sample.labels.get("model_name") == SERVED_NAME, (name, sample.labels)
        if name in LABEL_VALUES:
            label, values = LABEL_VALUES[name]
            assert values <= {s.labels.get(label) for s in samples}, (name, label)
    info = families["vllm:cache_config_info"].samples[0].labels
    assert int(info["block_size"]) > 0 and int(info["num_gpu_blocks"]) > 0
    for gone in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"):
        assert gone not in families, "removed in vLLM 0.32 and 0.34: must not come back"
    assert not any(n.startswith("vllm:nixl_") for n in families), "no connector, no NIXL series"


async def test_the_readers_parse_the_page(aggregated: Engine) -> None:
    text = await page_after_a_request(aggregated)
    sample = parse_engine_sample(text, time.time(), SERVED_NAME)
    for field in ("waiting_requests", "running_requests", "kv_usage", "kv_capacity_tokens",
                  "prompt_tokens", "generation_tokens", "preemptions", "requests_finished",
                  "ttft", "itl"):  # fmt: skip
        assert getattr(sample, field) is not None, field
    assert sample.requests_finished is not None and sample.requests_finished >= 1
    gauges = parse_engine_gauges(text)
    assert None not in (gauges.waiting, gauges.running, gauges.kv_usage)
    assert 0 <= (gauges.kv_usage or 0) <= 1


async def test_pd_engines_add_their_series(pd: tuple[Engine, Engine]) -> None:
    prefill, decode = pd
    for engine in pd:
        families = {f.name: f.type for f in text_string_to_metric_families(
            await metrics_of(engine))}  # fmt: skip
        for name in ("vllm:nixl_num_failed_transfers", "vllm:nixl_num_kv_expired_reqs"):
            assert families.get(name) == "counter", (engine.name, name)
    decode_families = {f.name: f for f in text_string_to_metric_families(
        await metrics_of(decode))}  # fmt: skip
    stages = {s.labels["stage"] for s in decode_families["vllm:num_requests_kv_fetch_by_stage"]
              .samples}  # fmt: skip
    assert {"waiting_to_start", "in_progress"} <= stages
    prefill_families = {f.name for f in text_string_to_metric_families(
        await metrics_of(prefill))}  # fmt: skip
    assert "vllm:num_requests_kv_fetch_by_stage" not in prefill_families
