"""Engine and router pages → samples, on pages generated with prometheus_client."""

from __future__ import annotations

import pytest

from tandem.observe.histogram import INF, compute_quantile
from tandem.observe.parse import parse_engine_sample, parse_router_sample
from tandem.observe.text import ExpositionError
from tandem.router.metrics import RouterMetrics
from tests.observe.vllm_metrics import VllmMetrics


def make_engine(
    engines: tuple[str, ...] = ("0",), num_gpu_blocks: int | None = 1000
) -> VllmMetrics:
    metrics = VllmMetrics(engines=engines, num_gpu_blocks=num_gpu_blocks)
    for i, engine in enumerate(engines):
        metrics.set_gauges(engine, waiting=3 + i, running=10 + i, kv_usage=0.5 + 0.25 * i)
        metrics.add_work(
            engine,
            prompt_tokens=1000,
            generation_tokens=200,
            preemptions=1,
            finished={"stop": 4, "length": 1},
            ttft_s=[0.03, 0.3, 0.3],
            itl_s=[0.02] * 10,
        )
    return metrics


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text-colons", "openmetrics"])
def test_engine_page_in_either_format_and_spelling(openmetrics: bool) -> None:
    page = make_engine().render(openmetrics)
    assert ("vllm:num_requests_waiting{" in page) is not openmetrics
    assert ("vllm_num_requests_waiting{" in page) is openmetrics
    sample = parse_engine_sample(page, at_s=12.5)
    assert sample.at_s == 12.5
    assert (sample.waiting_requests, sample.running_requests, sample.kv_usage) == (3, 10, 0.5)
    assert sample.kv_capacity_tokens == 16 * 1000
    assert sample.prompt_tokens == 1000 and sample.generation_tokens == 200
    assert sample.preemptions == 1 and sample.requests_finished == 5
    assert sample.ttft is not None and sample.ttft.count == 3
    assert sample.ttft.buckets[-1] == (INF, 3)
    assert compute_quantile(sample.ttft, 0.5) == pytest.approx(0.25 + 0.25 * (1.5 - 1) / 2)
    assert sample.itl is not None and sample.itl.count == 10


def test_data_parallel_engines_are_summed_and_kv_usage_averaged() -> None:
    sample = parse_engine_sample(make_engine(("0", "1")).render(), at_s=0)
    assert sample.waiting_requests == 3 + 4 and sample.running_requests == 10 + 11
    assert sample.kv_usage == pytest.approx((0.5 + 0.75) / 2)
    assert sample.kv_capacity_tokens == 2 * 16 * 1000
    assert sample.prompt_tokens == 2000 and sample.requests_finished == 10
    assert sample.ttft is not None and sample.ttft.count == 6


def test_model_name_filter_ignores_other_models() -> None:
    metrics = make_engine()
    metrics.waiting.labels("other", "0").set(50)
    metrics.prompt_tokens.labels("other", "0").inc(9999)
    page = metrics.render()
    assert parse_engine_sample(page, 0, model_name="llama").waiting_requests == 3
    assert parse_engine_sample(page, 0, model_name="llama").prompt_tokens == 1000
    assert parse_engine_sample(page, 0).waiting_requests == 53


def test_waiting_by_reason_is_not_mistaken_for_waiting() -> None:
    sample = parse_engine_sample(make_engine().render(), 0)
    assert sample.waiting_requests == 3  # the by-reason gauges are set to 99


def test_waiting_for_capacity_sums_the_capacity_reason_over_engines() -> None:
    metrics = make_engine(engines=("0", "1"))
    metrics.waiting_by_reason.labels("llama", "1", "capacity").set(2)
    sample = parse_engine_sample(metrics.render(), 0)
    assert sample.waiting_for_capacity == 99 + 2  # "deferred" (99 each) is left out
    older = "vllm:num_requests_waiting 4\n"  # an engine without the by-reason gauge
    assert parse_engine_sample(older, 0).waiting_for_capacity is None


def test_unprofiled_cache_and_missing_metrics_read_as_none() -> None:
    sample = parse_engine_sample(make_engine(num_gpu_blocks=None).render(), 0)
    assert sample.kv_capacity_tokens is None
    empty = parse_engine_sample("# nothing here\nother_metric 1\n", 0)
    assert empty.waiting_requests is None and empty.ttft is None and empty.prompt_tokens is None


def test_malformed_page_raises() -> None:
    with pytest.raises(ExpositionError, match="line 2"):
        parse_engine_sample("vllm:num_requests_waiting 1\nvllm:num_requests_running{\n", 0)


def make_router() -> RouterMetrics:
    metrics = RouterMetrics(lambda: [])
    gold, bronze = metrics.for_class("gold"), metrics.for_class("bronze")
    for value in (0.1, 0.2, 0.2, 0.9):
        gold.ttft.observe(value)
    for value in (0.03, 0.03):
        gold.itl.observe(value)
    bronze.ttft.observe(2.0)
    metrics.requests.labels("gold", "200").inc(4)
    metrics.requests.labels("gold", "503").inc(1)
    metrics.requests.labels("bronze", "200").inc(1)
    metrics.requests.labels("silver", "429").inc(2)  # a class seen only in the counter
    return metrics


def test_router_page_by_class_from_the_real_router_metrics() -> None:
    sample = parse_router_sample(make_router().render().decode(), at_s=3.0)
    assert sample.at_s == 3.0
    assert sorted(sample.classes) == ["bronze", "gold", "silver"]
    gold = sample.classes["gold"]
    assert gold.ttft is not None and gold.ttft.count == 4
    assert gold.itl is not None and gold.itl.count == 2
    assert gold.requests_by_code == {"200": 4, "503": 1}
    bronze = sample.classes["bronze"]
    assert bronze.ttft is not None and bronze.ttft.count == 1
    assert bronze.itl is not None and bronze.itl.count == 0
    assert sample.classes["silver"].requests_by_code == {"429": 2}


def test_router_page_without_traffic_has_no_classes() -> None:
    assert parse_router_sample(RouterMetrics(lambda: []).render().decode(), 0).classes == {}
