"""Samples of two scrapes → rates, percentiles and the pool observation."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.observe.compute import (
    PodScrape,
    PoolScrape,
    compute_increase,
    compute_observation,
    compute_pool,
    compute_rate,
)
from tandem.observe.histogram import INF, Histogram
from tandem.observe.parse import ClassSample, EngineSample, RouterSample


def hist(*counts: float, bounds: tuple[float, ...] = (0.1, 0.5, 1.0)) -> Histogram:
    """Cumulative counts for ``bounds`` plus ``+Inf`` (the last count is repeated)."""
    rows = list(zip(bounds, counts, strict=False))
    return Histogram(buckets=(*rows, (INF, counts[-1])))


def engine(
    at_s: float,
    *,
    waiting: float = 2,
    running: float = 5,
    kv: float = 0.5,
    prompt: float = 0,
    generation: float = 0,
    ttft: Histogram | None = None,
    capacity: float | None = 16000,
    for_capacity: float | None = None,
) -> EngineSample:
    return EngineSample(
        at_s=at_s,
        waiting_requests=waiting,
        waiting_for_capacity=for_capacity,
        running_requests=running,
        kv_usage=kv,
        kv_capacity_tokens=capacity,
        prompt_tokens=prompt,
        generation_tokens=generation,
        preemptions=0,
        requests_finished=prompt / 100,
        ttft=ttft,
        itl=None,
    )


def test_counter_increase_handles_restart() -> None:
    assert compute_increase(10, 25) == 15
    assert compute_increase(100, 7) == 7
    assert compute_increase(None, 7) is None
    assert compute_rate(10, 25, 5) == 3
    assert compute_rate(10, 25, 0) is None


@given(
    previous=st.floats(min_value=0, max_value=1e12),
    current=st.floats(min_value=0, max_value=1e12),
    elapsed_s=st.floats(min_value=1e-3, max_value=1e4),
)
def test_rates_are_never_negative(previous: float, current: float, elapsed_s: float) -> None:
    rate = compute_rate(previous, current, elapsed_s)
    assert rate is not None and rate >= 0


@given(
    totals=st.lists(st.floats(min_value=0, max_value=1e9), min_size=2, max_size=8),
    waiting=st.floats(min_value=0, max_value=1e4),
)
def test_pool_rates_are_never_negative(totals: list[float], waiting: float) -> None:
    pods = {
        f"p{i}": PodScrape(
            current=engine(20, prompt=after, generation=after, waiting=waiting),
            previous=engine(10, prompt=before, generation=before / 2),
        )
        for i, (before, after) in enumerate(itertools.pairwise(totals))
    }
    pool = compute_pool("decode", PoolScrape(len(pods), len(pods), pods))
    assert pool.prompt_tokens_per_s >= 0 and pool.generation_tokens_per_s >= 0
    assert pool.requests_finished_per_s >= 0
    assert pool.rated == len(pods)


def test_pool_sums_gauges_averages_kv_and_rates_over_each_pods_window() -> None:
    pods = {
        "a": PodScrape(
            current=engine(20, waiting=1, kv=0.2, prompt=1500),
            previous=engine(10, prompt=1000),
        ),
        "b": PodScrape(  # missed a tick: its window is 20 s
            current=engine(20, waiting=4, kv=0.8, prompt=500),
            previous=engine(0, prompt=100),
        ),
        "c": PodScrape(current=engine(20, waiting=2, kv=0.5, prompt=10)),  # first seen
    }
    pool = compute_pool("prefill", PoolScrape(replicas=4, ready=3, pods=pods))
    assert pool.scraped == 3 and pool.rated == 2 and pool.failed == {}
    assert pool.waiting_requests == 7 and pool.running_requests == 15
    assert pool.kv_usage == pytest.approx(0.5) and pool.kv_usage_max == 0.8
    assert pool.prompt_tokens_per_s == pytest.approx(500 / 10 + 400 / 20)
    assert pool.kv_capacity_tokens == 16000
    assert pool.pods["b"].waiting_requests == 4
    assert pool.available and not pool.rates_available


def test_waiting_for_capacity_is_known_only_when_every_answering_pod_says() -> None:
    both = {
        "a": PodScrape(current=engine(20, waiting=3, for_capacity=1)),
        "b": PodScrape(current=engine(20, waiting=2, for_capacity=2)),
        "gone": PodScrape(error="refused"),  # a failed pod does not make it unknown
    }
    assert compute_pool("decode", PoolScrape(3, 3, both)).waiting_for_capacity == 3
    one = {**both, "b": PodScrape(current=engine(20, waiting=2))}  # an older vLLM
    assert compute_pool("decode", PoolScrape(3, 3, one)).waiting_for_capacity is None


def test_restarted_pod_counts_its_current_total() -> None:
    pods = {"a": PodScrape(current=engine(20, prompt=300), previous=engine(10, prompt=5000))}
    assert compute_pool("prefill", PoolScrape(1, 1, pods)).prompt_tokens_per_s == 30


def test_failed_pods_are_reported_with_their_error() -> None:
    pods: dict[str, PodScrape[EngineSample]] = {
        "ok": PodScrape(current=engine(20), previous=engine(10)),
        "slow": PodScrape(error="no answer from http://x within 2 s", previous=engine(10)),
        "odd": PodScrape(current=EngineSample(at_s=20, waiting_requests=1)),
        "never": PodScrape(),
    }
    pool = compute_pool("decode", PoolScrape(4, 4, pods))
    assert pool.scraped == 1
    assert pool.failed["slow"] == "no answer from http://x within 2 s"
    assert "vllm:num_requests_running" in pool.failed["odd"]
    assert "vllm:kv_cache_usage_perc" in pool.failed["odd"]
    assert pool.failed["never"] == "not scraped"
    assert not pool.available


def two(previous: EngineSample, current: EngineSample) -> PodScrape[EngineSample]:
    return PodScrape(current=current, previous=previous)


def test_engine_latency_from_histogram_deltas() -> None:
    pods = {"a": two(engine(10, ttft=hist(1, 1, 2)), engine(20, ttft=hist(1, 9, 10)))}
    pool = compute_pool("prefill", PoolScrape(1, 1, pods))
    assert pool.latency is not None and pool.latency.source == "engine"
    assert pool.latency.requests == 8
    assert pool.latency.ttft_s[50] == pytest.approx(0.1 + 0.4 * 4 / 8)
    quiet = {"a": two(engine(10, ttft=hist(1, 1, 2)), engine(20, ttft=hist(1, 1, 2)))}
    quiet_pool = compute_pool("prefill", PoolScrape(1, 1, quiet))
    assert quiet_pool.latency is not None and quiet_pool.latency.ttft_s == {}


def test_window_means_come_from_the_histogram_sums() -> None:
    before = Histogram(buckets=((0.1, 1.0), (INF, 2.0)), sum=0.5)
    after = Histogram(buckets=((0.1, 3.0), (INF, 6.0)), sum=2.5)  # 4 more, 2.0 s in all
    pods = {"a": two(engine(10, ttft=before), engine(20, ttft=after))}
    pool = compute_pool("prefill", PoolScrape(1, 1, pods))
    assert pool.latency is not None
    assert pool.latency.ttft_mean_s == pytest.approx(0.5)
    assert pool.latency.itl_mean_s is None  # no ITL samples: no mean, not zero


def router(at_s: float, **classes: ClassSample) -> RouterSample:
    return RouterSample(at_s=at_s, classes=classes)


def gold(ttft: Histogram, requests_by_code: dict[str, float]) -> ClassSample:
    return ClassSample(ttft=ttft, requests_by_code=requests_by_code)


def test_router_latency_per_class_is_preferred_and_summed_over_router_pods() -> None:
    routers: dict[str, PodScrape[RouterSample]] = {
        "r0": PodScrape(
            current=router(20, gold=gold(hist(2, 6, 6), {"200": 30, "503": 10})),
            previous=router(10, gold=gold(hist(2, 2, 2), {"200": 10})),
        ),
        "r1": PodScrape(  # the class appeared after r1's previous scrape
            current=router(20, gold=gold(hist(0, 4, 4), {"200": 10})),
            previous=router(10),
        ),
        "r2": PodScrape(error="HTTP 500 from http://r2/metrics: boom"),
    }
    pools = {"prefill": PoolScrape(1, 1, {"p": two(engine(10), engine(20, ttft=hist(1, 1, 1)))})}
    obs = compute_observation(20, 10, pools, routers)
    latency = obs.latency_by_class["gold"]
    assert latency.source == "router" and latency.requests == 8
    assert latency.ttft_s[50] == pytest.approx(0.1 + 0.4 * 4 / 8)
    assert latency.requests_per_s == pytest.approx((20 + 10 + 10) / 10)
    assert latency.error_requests_per_s == pytest.approx(1.0)
    assert obs.errors == ("router pod r2: HTTP 500 from http://r2/metrics: boom",)
    assert obs.now_s == 20 and obs.window_s == 10


def test_engine_fallback_without_router_series() -> None:
    first_tokens = two(engine(10, ttft=hist(0, 0, 0)), engine(20, ttft=hist(0, 4, 4)))
    pools = {
        "prefill": PoolScrape(1, 1, {"p": first_tokens}),
        "decode": PoolScrape(1, 1, {"d": two(engine(10), engine(20))}),
    }
    obs = compute_observation(20, 10, pools, {"r0": PodScrape(current=router(20))})
    fallback = obs.latency_by_class["default"]
    assert fallback.source == "engine" and fallback.requests == 4
    assert fallback.ttft_s[50] == pytest.approx(0.3)
    assert compute_observation(20, 10, {}, {}).latency_by_class == {}


def test_the_router_s_feasibility_accounting_over_the_window() -> None:
    ratio = (0.5, 1.0, 2.0)

    def judged(*counts: float, ttft: float, itl: float, absorbed: float) -> ClassSample:
        return ClassSample(
            ttft=hist(*counts),
            queueing=hist(*counts, bounds=ratio),
            infeasible_by_reason={"ttft": ttft, "itl": itl},
            absorbed_requests=absorbed,
            absorbed_prompt_tokens=absorbed * 1000,
        )

    routers: dict[str, PodScrape[RouterSample]] = {
        "r0": PodScrape(
            current=router(20, gold=judged(4, 12, 14, ttft=7, itl=0, absorbed=5)),
            previous=router(10, gold=judged(2, 4, 5, ttft=3, itl=0, absorbed=1)),
        ),
        "r1": PodScrape(  # restarted: its counters start again
            current=router(20, gold=judged(1, 2, 2, ttft=1, itl=0, absorbed=2)),
            previous=router(10, gold=judged(5, 5, 5, ttft=9, itl=0, absorbed=9)),
        ),
    }
    obs = compute_observation(20, 10, {}, routers)
    gold = obs.latency_by_class["gold"]
    # queueing ratios: r0 added 2 at <= 0.5, 6 more at <= 1 and 1 at <= 2; r1 restarted
    # and holds 1 and 1 more: 3 of 11 at <= 0.5, 10 at <= 1, so the median interpolates
    # inside (0.5, 1]
    assert gold.feasible_requests == 11
    assert gold.queueing_ratio[50] == pytest.approx(0.5 + 0.5 * (5.5 - 3) / (10 - 3))
    assert gold.infeasible_requests == {"ttft": 4 + 1}  # no itl: zero counts are left out
    assert obs.absorbed_requests_per_s == pytest.approx((4 + 2) / 10)
    assert obs.absorbed_prompt_tokens_per_s == pytest.approx((4 + 2) * 100)


def test_a_router_without_the_accounting_leaves_it_unknown() -> None:
    routers = {
        "r0": PodScrape(
            current=router(20, gold=gold(hist(2, 6, 6), {"200": 30})),
            previous=router(10, gold=gold(hist(2, 2, 2), {"200": 10})),
        )
    }
    gold_obs = compute_observation(20, 10, {}, routers).latency_by_class["gold"]
    assert gold_obs.feasible_requests is None and gold_obs.queueing_ratio == {}
    assert gold_obs.infeasible_requests == {}
