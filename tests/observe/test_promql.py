"""The Prometheus source's pure half: PromQL built from labels, answers → observation."""

from __future__ import annotations

import math

import pytest

from tandem.observe.promql import (
    PromLabels,
    PromTarget,
    QueryKey,
    build_matchers,
    build_pool_queries,
    build_queries,
    build_router_queries,
    format_range,
    quote,
)
from tandem.observe.promresult import (
    PoolSize,
    PrometheusQueryError,
    Vector,
    compute_prometheus_observation,
    parse_query_response,
)

TARGET = PromTarget(namespace="prod", service="chat")
SEL = 'namespace="prod",service="chat"'


def test_ranges_and_literals() -> None:
    assert [format_range(s) for s in (60, 90, 300, 2.5)] == ["1m", "90s", "5m", "2500ms"]
    with pytest.raises(ValueError):
        format_range(0)
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_matchers_use_configurable_label_names_and_pin_pods() -> None:
    assert build_matchers(TARGET, "decode") == f'{SEL},pool="decode"'
    labels = PromLabels(
        namespace="kubernetes_namespace", service="serving_tandem_dev_service", pool="role"
    )
    custom = PromTarget("prod", "chat", labels=labels)
    assert build_matchers(custom, "router", pods=["chat-router-1", "chat-router-0"]) == (
        'kubernetes_namespace="prod",serving_tandem_dev_service="chat",role="router",'
        'pod=~"chat\\\\-router\\\\-0|chat\\\\-router\\\\-1"'
    )
    assert build_matchers(TARGET, "decode", pods=[]).endswith('pod=~"^$"')


def test_engine_queries_match_both_vllm_spellings() -> None:
    queries = build_pool_queries(TARGET, "prefill", 60, percentiles=(90,))
    sel = f'{SEL},pool="prefill"'
    assert queries["prefill", "waiting"] == (
        f'sum by (pod) ({{__name__=~"vllm[:_]num_requests_waiting",{sel}}})'
    )
    assert queries["prefill", "kv_usage"] == (
        f'avg by (pod) ({{__name__=~"vllm[:_]kv_cache_usage_perc",{sel}}})'
    )
    assert queries["prefill", "prompt_tokens_per_s"] == (
        f'sum by (pod) (rate({{__name__=~"vllm[:_]prompt_tokens_total",{sel}}}[1m]))'
    )
    assert queries["prefill", "ttft:90"] == (
        "histogram_quantile(0.9, sum by (le) (rate("
        f'{{__name__=~"vllm[:_]time_to_first_token_seconds_bucket",{sel}}}[1m])))'
    )
    assert queries["prefill", "up"] == f"up{{{sel}}}"
    assert queries["prefill", "waiting_capacity"] == (
        'sum by (pod) ({__name__=~"vllm[:_]num_requests_waiting_by_reason",'
        f'{sel},reason="capacity"}}) or vector(0)'
    )
    with_model = PromTarget("prod", "chat", model_name="llama")
    assert 'model_name="llama"' in build_pool_queries(with_model, "decode", 60)["decode", "running"]
    assert "model_name" not in build_pool_queries(with_model, "decode", 60)["decode", "kv_info"]


def test_router_queries_group_by_class() -> None:
    queries = build_router_queries(TARGET, 30, percentiles=(99,))
    sel = f'{SEL},pool="router"'
    assert queries["router", "ttft:99"] == (
        "histogram_quantile(0.99, sum by (le, class) (rate("
        f"tandem_router_time_to_first_token_seconds_bucket{{{sel}}}[30s])))"
    )
    assert queries["router", "requests_per_s"] == (
        f"sum by (class, code) (rate(tandem_router_requests_total{{{sel}}}[30s]))"
    )
    assert queries["router", "queueing:99"] == (
        "histogram_quantile(0.99, sum by (le, class) (rate("
        f"tandem_router_ttft_queueing_ratio_bucket{{{sel}}}[30s])))"
    )
    assert queries["router", "infeasible"] == (
        "sum by (class, reason) (increase("
        f"tandem_router_requests_infeasible_total{{{sel}}}[30s])) or vector(0)"
    )
    assert queries["router", "absorbed_tokens_per_s"] == (
        f"sum(rate(tandem_router_absorbed_prompt_tokens_total{{{sel}}}[30s])) or vector(0)"
    )
    assert {key[0] for key in build_queries(TARGET, ["prefill", "decode"], 60)} == {
        "prefill",
        "decode",
        "router",
    }


def vector(*rows: tuple[dict[str, str], str]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.0, v]} for m, v in rows],
        },
    }


def test_parse_query_response() -> None:
    parsed = parse_query_response(vector(({"pod": "a"}, "1.5"), ({}, "NaN"), ({}, "+Inf")))
    assert parsed[0] == ({"pod": "a"}, 1.5)
    assert math.isnan(parsed[1][1]) and parsed[2][1] == math.inf
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [0, "2"]}}
    assert parse_query_response(scalar) == [({}, 2.0)]
    with pytest.raises(PrometheusQueryError, match=r"query failed: bad_data$"):
        parse_query_response({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(PrometheusQueryError, match="malformed"):
        parse_query_response({"status": "success", "data": {}})
    with pytest.raises(PrometheusQueryError, match="instant vector"):
        parse_query_response({"status": "success", "data": {"resultType": "matrix"}})


def test_answers_become_an_observation_with_failures_and_empty_queries() -> None:
    queries = build_queries(TARGET, ["decode"], 60, percentiles=(50,))
    results: dict[QueryKey, Vector | Exception] = {key: [] for key in queries}
    results |= {
        ("decode", "up"): [({"pod": "d0"}, 1.0), ({"pod": "d1"}, 0.0)],
        ("decode", "waiting"): [({"pod": "d0"}, 3.0), ({"pod": "d2"}, 1.0)],
        ("decode", "running"): [({"pod": "d0"}, 20.0), ({"pod": "d2"}, 2.0)],
        ("decode", "waiting_capacity"): [({"pod": "d0"}, 1.0), ({}, 0.0)],
        ("decode", "kv_usage"): [({"pod": "d0"}, 0.6)],
        ("decode", "kv_info"): [
            ({"pod": "d0", "engine": "0", "block_size": "16", "num_gpu_blocks": "1000"}, 1.0),
            ({"pod": "d0", "engine": "1", "block_size": "16", "num_gpu_blocks": "1000"}, 1.0),
        ],
        ("decode", "generation_tokens_per_s"): [({"pod": "d0"}, 120.0)],
        ("decode", "prompt_tokens_per_s"): [({"pod": "d0"}, 12.0)],
        ("decode", "itl:50"): [({}, 0.04)],
        ("decode", "ttft:50"): [({}, math.nan)],
        ("decode", "ttft_requests"): [({}, 0.0)],
        ("router", "ttft:50"): [({"class": "gold"}, 0.5), ({"class": "bronze"}, math.nan)],
        ("router", "requests_per_s"): [
            ({"class": "gold", "code": "200"}, 3.0),
            ({"class": "gold", "code": "502"}, 1.0),
        ],
        ("router", "itl:50"): PrometheusQueryError("no answer from http://prom within 5 s"),
        ("router", "queueing:50"): [({"class": "gold"}, 0.7)],
        ("router", "feasible_requests"): [({"class": "gold"}, 40.0)],
        ("router", "infeasible"): [
            ({"class": "gold", "reason": "ttft"}, 6.0),
            ({"class": "gold", "reason": "itl"}, 0.0),
            ({}, 0.0),  # the "or vector(0)" of a counter without series yet
        ],
        ("router", "absorbed_per_s"): [({}, 0.5)],
        ("router", "absorbed_tokens_per_s"): [({}, 700.0)],
    }
    pools = {"decode": PoolSize(replicas=4, ready=4, pods=("d0", "d1", "d2", "d3"))}
    obs = compute_prometheus_observation(100, 60, pools, queries, results, percentiles=(50,))
    d = obs.pools["decode"]
    assert d.scraped == 1 and d.rated == 1
    assert (d.waiting_requests, d.running_requests, d.kv_usage) == (3, 20, 0.6)
    assert d.kv_capacity_tokens == 32000
    assert d.waiting_for_capacity == 1  # d0 alone answered
    assert d.generation_tokens_per_s == 120 and d.prompt_tokens_per_s == 12
    assert d.failed["d1"] == "Prometheus reports the target down (up == 0)"
    assert "vllm:kv_cache_usage_perc" in d.failed["d2"]
    assert "not scraped yet" in d.failed["d3"]
    assert d.latency is not None and d.latency.itl_s == {50: 0.04} and d.latency.ttft_s == {}
    gold = obs.latency_by_class["gold"]
    assert gold.ttft_s == {50: 0.5} and gold.requests_per_s == 4 and gold.error_requests_per_s == 1
    assert gold.queueing_ratio == {50: 0.7} and gold.feasible_requests == 40
    assert gold.infeasible_requests == {"ttft": 6.0}
    assert (obs.absorbed_requests_per_s, obs.absorbed_prompt_tokens_per_s) == (0.5, 700.0)
    assert obs.latency_by_class["bronze"].ttft_s == {}
    assert obs.latency_by_class["bronze"].feasible_requests is None
    assert queries["decode", "preemptions_per_s"] in obs.empty_queries
    assert any("queries failed: no answer from http://prom" in e for e in obs.errors)
    assert any(e.startswith("decode: ") and "no series" in e for e in obs.errors)


def test_prometheus_down_means_unavailable_not_zero_load() -> None:
    queries = build_queries(TARGET, ["prefill", "decode"], 60)
    down = PrometheusQueryError("ClientConnectorError for http://prom: refused")
    results: dict[QueryKey, Vector | Exception] = {key: down for key in queries}
    pools = {"prefill": PoolSize(2, 2), "decode": PoolSize(3, 3)}
    obs = compute_prometheus_observation(0, 60, pools, queries, results)
    assert not obs.pools["prefill"].available and not obs.pools["decode"].available
    assert len(obs.errors) == 1 and obs.errors[0].startswith(f"{len(queries)} of {len(queries)}")
    assert obs.empty_queries == ()
