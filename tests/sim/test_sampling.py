"""Metrics sampled the way the operator scrapes them, through its own compute path."""

from __future__ import annotations

import pytest

from tandem.engine.server import metrics as vllm_metrics
from tandem.observe.histogram import BucketCounter
from tandem.router import metrics as router_metrics
from tandem.sim.fleet.histogram import (
    ROUTER_ITL_BUCKETS_S,
    ROUTER_RATIO_BUCKETS,
    ROUTER_TTFT_BUCKETS_S,
    VLLM_ITL_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
)
from tandem.sim.fleet.sampling import MetricsSampler, sample_engine, sample_fleet
from tandem.sim.fleet.simulation import Simulation, SimulationOptions
from tandem.sim.fleet.spec import build_fleet_plan
from tests.sim.factories import make_isvc, make_trace


def test_buckets_are_vllms_and_the_routers() -> None:
    assert VLLM_TTFT_BUCKETS_S == vllm_metrics.TTFT_BUCKETS
    assert VLLM_ITL_BUCKETS_S == vllm_metrics.ITL_BUCKETS
    assert ROUTER_TTFT_BUCKETS_S == router_metrics.LATENCY_BUCKETS_S
    assert ROUTER_ITL_BUCKETS_S == router_metrics.ITL_BUCKETS_S
    assert ROUTER_RATIO_BUCKETS == router_metrics.RATIO_BUCKETS


def test_bucket_counter_is_a_cumulative_histogram() -> None:
    c = BucketCounter((0.1, 1.0))
    c.observe(0.1)
    c.observe(0.5, count=3)
    c.observe(7.0)
    h = c.histogram()
    assert h.buckets == ((0.1, 1.0), (1.0, 4.0), (float("inf"), 5.0))
    assert h.sum == pytest.approx(8.6)


def run_static(n: int = 400, rate: float = 20.0) -> Simulation:
    plan = build_fleet_plan(make_isvc())
    options = SimulationOptions(initial_replicas={"prefill": 2, "decode": 2})
    return Simulation(plan, make_trace(n, rate), None, options).run()


def test_an_engine_page_holds_the_engines_counters() -> None:
    sim = run_static()
    pod = sim.fleet.pods["decode"][0]
    page = sample_engine(pod, 99.0)
    engine = pod.engine
    assert page.at_s == 99.0
    assert page.generation_tokens == engine.generation_tokens_total > 0
    assert page.prompt_tokens == engine.prompt_tokens_total > 0
    assert page.requests_finished == engine.requests_finished_total
    assert page.kv_capacity_tokens == engine.config.num_gpu_blocks * 16
    assert page.itl is not None and page.itl.count > 0
    assert page.ttft is not None and page.ttft.count == page.requests_finished


def test_two_scrapes_give_rates_and_window_percentiles() -> None:
    plan = build_fleet_plan(make_isvc())
    options = SimulationOptions(initial_replicas={"prefill": 2, "decode": 2})
    sim = Simulation(plan, make_trace(600, 20.0), None, options)
    sampler = MetricsSampler()
    observations = []

    def scrape(now: float) -> None:
        if now in (10.0, 20.0):
            observations.append(sampler.observe(now, sample_fleet(sim.fleet, sim.router, now)))

    sim.run(scrape)
    first, second = observations
    assert first.pools["prefill"].rated == 0 and first.pools["prefill"].prompt_tokens_per_s == 0
    pool = second.pools["decode"]
    assert pool.rated == pool.scraped == 2
    assert second.window_s == 10.0
    assert pool.generation_tokens_per_s > 0 and pool.requests_finished_per_s > 0
    assert 0.0 < (pool.gpu_utilization or 0.0) <= 1.0
    latency = second.latency_by_class["default"]
    assert latency.source == "router" and latency.requests > 0
    assert 0.0 < latency.ttft_s[90] < 1.0
    assert 0.0 < latency.itl_s[90] < 0.05
    assert latency.requests_per_s == pytest.approx(pool.requests_finished_per_s, rel=0.2)


def test_only_ready_pods_are_scraped_and_counted() -> None:
    sim = run_static(50)
    starting = sim.fleet.create("decode", sim.end_s)
    sample = sample_fleet(sim.fleet, sim.router, sim.end_s)
    replicas, ready, pages = sample.pools["decode"]
    assert (replicas, ready) == (3, 2)
    assert starting.name not in pages
