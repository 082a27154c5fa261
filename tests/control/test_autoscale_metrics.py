"""The autoscaler's series: values, bounded labels, removal with the service."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tandem.control.autoscale_metrics import (
    AutoscalerSeries,
    compute_bucket_le,
    compute_slo_series,
)
from tandem.control.metrics import OperatorMetrics
from tandem.observe.types import Observation
from tandem.policy.config import LatencyTargets, PoolConfig
from tandem.policy.types import Decision, PoolDecision
from tandem.router.metrics import ITL_BUCKETS_S, LATENCY_BUCKETS_S
from tests.policy.factories import make_config, make_obs, make_pool


def samples(metrics: OperatorMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("tandem_autoscaler_")
    }


def decision(**signals: float) -> Decision:
    return Decision(
        100.0,
        {
            "prefill": PoolDecision(
                "prefill",
                1,
                2,
                "prefill 1→2: prompt demand 20k tok/s / (0.8 × 15k)",
                signals,
                driver="demand",
            ),
            "decode": PoolDecision(
                "decode", 2, 2, "decode 2: holding, metrics unavailable (pod d: x)", {}, False
            ),
        },
    )


def test_le_is_the_router_bucket_at_or_below_the_target() -> None:
    assert compute_bucket_le(0.8, LATENCY_BUCKETS_S) == "0.8"
    assert compute_bucket_le(0.7, LATENCY_BUCKETS_S) == "0.6"
    assert compute_bucket_le(1.0, LATENCY_BUCKETS_S) == "1.0"
    assert compute_bucket_le(0.05, ITL_BUCKETS_S) == "0.05"
    assert compute_bucket_le(0.001, ITL_BUCKETS_S) == "0.0025"


def test_slo_series_per_class_on_the_pool_each_signal_loads() -> None:
    config = make_config(
        class_targets={
            "interactive": LatencyTargets(0.5, 90, 0.03, 99),
            "batch": LatencyTargets(10.0, 50, None, 90),
        }
    )
    found = {
        (s.pool, s.signal, s.klass): (s.le, s.target_s, s.objective)
        for s in compute_slo_series(config)
    }
    assert found == {
        ("prefill", "ttft", "interactive"): ("0.5", 0.5, 0.9),
        ("decode", "itl", "interactive"): ("0.03", 0.03, 0.99),
        ("prefill", "ttft", "batch"): ("10.0", 10.0, 0.5),
    }
    aggregated = make_config(pools={"pool": PoolConfig("pool", 1, 4, 1)})
    assert {(s.pool, s.klass) for s in compute_slo_series(aggregated)} == {("pool", "default")}


def test_a_tick_sets_every_series_and_deletion_removes_them() -> None:
    metrics = OperatorMetrics()
    series = AutoscalerSeries(metrics)
    obs = make_obs(
        100.0,
        make_pool("prefill", 1),
        make_pool("decode", 2, scraped=1, failed={"d": "HTTP 500"}),
        errors=("router pod r: refused",),
    )
    series.record(("ns", "chat"), make_config(), obs, decision(demand=20000.0, capacity=15000.0))
    series.record(("ns", "other"), make_config(), obs, decision())
    found = samples(metrics)

    def value(name: str, **labels: str) -> float:
        return found[name, frozenset({"namespace": "ns", "service": "chat", **labels}.items())]

    assert value("tandem_autoscaler_desired_replicas", pool="prefill") == 2
    assert value("tandem_autoscaler_max_replicas", pool="decode") == 16
    assert value("tandem_autoscaler_metrics_available", pool="decode") == 0
    assert (
        value("tandem_autoscaler_decisions_total", pool="prefill", direction="up", reason="demand")
        == 1
    )
    assert (
        value(
            "tandem_autoscaler_decisions_total", pool="decode", direction="hold", reason="metrics"
        )
        == 1
    )
    assert value("tandem_autoscaler_signal", pool="prefill", signal="capacity") == 15000
    assert value("tandem_autoscaler_scrape_failures_total", pool="decode") == 1
    assert value("tandem_autoscaler_scrape_failures_total", pool="router") == 1
    assert (
        value(
            "tandem_autoscaler_slo_target_seconds",
            pool="prefill",
            signal="ttft",
            le="1.0",
            **{"class": "default"},
        )
        == 1.0
    )

    # A signal the policy no longer reports goes; counters keep counting.
    series.record(("ns", "chat"), make_config(), obs, decision(demand=0.0))
    found = samples(metrics)
    assert (
        "tandem_autoscaler_signal",
        frozenset(
            {"namespace": "ns", "service": "chat", "pool": "prefill", "signal": "capacity"}.items()
        ),
    ) not in found
    assert value("tandem_autoscaler_scrape_failures_total", pool="decode") == 2

    series.forget(("ns", "chat"))
    left = {dict(labels)["service"] for _, labels in samples(metrics)}
    assert left == {"other"}
    series.forget_all()
    assert samples(metrics) == {}


def test_an_empty_observation_exports_holds() -> None:
    metrics = OperatorMetrics()
    series = AutoscalerSeries(metrics)
    obs = Observation(now_s=1.0, window_s=0.0, pools={})
    series.record(("ns", "chat"), make_config(), obs, decision())
    assert samples(metrics)
