"""Each baseline against its published formula and defaults, and the replica calculator
against cases of the upstream Kubernetes tests (``replica_calculator_test.go``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem.observe.types import LatencyObservation, PodObservation
from tandem.policy.baselines import (
    DynamoSlaPlanner,
    Hpa,
    Keda,
    Kpa,
    LlmdSaturation,
    TandemAutoscaler,
)
from tandem.policy.baselines.hpa import (
    compute_external_average_replicas,
    compute_hpa_replicas,
    compute_pod_metric_replicas,
)
from tandem.policy.config import LatencyTargets, PoolConfig
from tests.policy.factories import decode_load, make_config, make_obs, make_pool, prefill_load

POOLS = {"decode": PoolConfig("decode", 1, 50, 1)}


def drive(scaler: Any, ticks: list) -> list:  # type: ignore[type-arg]
    state, out = scaler.initial_state(), []
    for obs in ticks:
        state, decision = scaler.decide(state, obs)
        out.append(decision.pools["decode"])
    return out


def test_hpa_formula_and_tolerance() -> None:
    assert compute_hpa_replicas(10, 1.09, 0.1) == 10
    assert compute_hpa_replicas(10, 1.11, 0.1) == 12
    assert compute_hpa_replicas(10, 0.5, 0.1) == 5


@pytest.mark.parametrize(
    ("upstream", "current", "values", "unready", "missing", "target", "expected"),
    [
        # Pods metrics (calcPlainMetricReplicas): the mean over the pods that reported.
        ("TestReplicaCalcScaleUpCM", 3, [20000, 10000, 30000], 0, 0, 15000, 4),
        ("TestReplicaCalcScaleDownCM", 5, [12000] * 5, 0, 0, 20000, 3),
        # A pod past its readiness but missing metrics during a rolling update counts at
        # the target on the way down, and the count would rise: keep the current one.
        ("TestReplicaCalcDuringRollingUpdateWithMaxSurgeCM", 2, [10000, 10000], 0, 1, 17000, 2),
        # Pending (unscheduled) pods are left out of a scale-down: ceil(0.2 x 1 ready).
        ("TestReplicaCalcScaleDownExcludeUnscheduledPods", 5, [10], 4, 0, 50, 1),
        # On a scale-up, unready and missing pods count as idle: (200 + 0 + 0) / 3 / 50.
        ("TestReplicaCalcMissingMetricsUnreadyScaleUp", 3, [200], 1, 1, 50, 4),
    ],
)
def test_the_replica_calculator_matches_upstream_cases(
    upstream: str,
    current: int,
    values: list[int],
    unready: int,
    missing: int,
    target: int,
    expected: int,
) -> None:
    got = compute_pod_metric_replicas(
        current, float(sum(values)), len(values), unready, missing, float(target), 0.1
    )
    assert got == expected, upstream


@pytest.mark.parametrize(
    ("upstream", "current", "total", "target", "expected"),
    [
        ("TestReplicaCalcScaleUpPerPodCMExternal", 3, 8600, 2150, 4),
        ("TestReplicaCalcScaleDownPerPodCMExternal", 5, 8600, 2867, 3),
    ],
)
def test_the_external_average_value_formula_matches_upstream_cases(
    upstream: str, current: int, total: int, target: int, expected: int
) -> None:
    assert compute_external_average_replicas(current, total, target, 0.1) == expected, upstream


def test_hpa_sizes_on_ready_pods_not_on_starting_ones() -> None:
    hpa = Hpa(POOLS, target=0.5)
    # 4 ready pods at 100 % utilization (twice the target), 4 more still starting: the
    # starting ones count as idle, 8 x 0.5 average = the target, so no new pods. The
    # bare formula on every pod (ceil(8 x 2) = 16) would double a pool already doubling.
    starting = make_pool("decode", 8, ready=4, scraped=4, gpu_utilization=1.0)
    (held,) = drive(hpa, [make_obs(0, starting)])
    assert held.desired == 8
    assert compute_hpa_replicas(8, 2.0, 0.1) == 16
    # Once they are ready and busy as well, it grows again.
    (grown,) = drive(hpa, [make_obs(0, make_pool("decode", 8, gpu_utilization=1.0))])
    assert grown.desired == 16
    # Idle ready pods shrink the pool on their own count (after the 300 s window).
    idle = make_pool("decode", 8, ready=4, scraped=4, gpu_utilization=0.1)
    ticks = [make_obs(t, idle) for t in range(0, 330, 15)]
    assert drive(hpa, ticks)[-1].desired == 1  # ceil(0.2 x 4 ready)


def test_hpa_scale_up_limit_is_max_of_4_pods_and_100_percent() -> None:
    hpa = Hpa(POOLS, target=0.5)
    (small,) = drive(hpa, [make_obs(0, make_pool("decode", 2, gpu_utilization=5.0))])
    assert small.desired == 6  # wants 20; limit max(2 + 4, 2 * 2)
    (big,) = drive(hpa, [make_obs(0, make_pool("decode", 10, gpu_utilization=5.0))])
    assert big.desired == 20  # wants 100; limit max(14, 20)


def test_hpa_scale_down_waits_300_s() -> None:
    hpa = Hpa(POOLS, target=0.5)
    ticks = [make_obs(0, make_pool("decode", 8, gpu_utilization=0.5))]
    ticks += [make_obs(t, make_pool("decode", 8, gpu_utilization=0.1)) for t in range(15, 330, 15)]
    out = drive(hpa, ticks)
    for obs, decision in zip(ticks, out, strict=True):
        if obs.now_s < 300:
            assert decision.desired == 8, obs.now_s
    assert out[-1].desired == 2  # ceil(8 * 0.1 / 0.5) once the 300 s window has passed


def test_keda_is_ceil_of_total_waiting_over_5_on_the_hpas_15_s_loop() -> None:
    (d,) = drive(Keda(POOLS), [make_obs(0, make_pool("decode", 3, waiting_requests=23))])
    assert d.desired == 5  # ceil(23 / 5)
    # Between 1 and N replicas the HPA's sync loop decides, not KEDA's 30 s polling.
    assert Keda(POOLS).interval_s == 15.0
    # An AverageValue target sizes on the total alone, starting pods or not.
    starting = make_pool("decode", 6, ready=3, scraped=3, waiting_requests=23)
    (down,) = drive(Keda(POOLS), [make_obs(0, starting)])
    assert down.desired == 5


def test_kpa_stable_window_and_panic() -> None:
    kpa = Kpa(POOLS)
    assert kpa.target == 70.0 and kpa.panic_s == 6.0 and kpa.interval_s == 2.0
    (calm,) = drive(kpa, [make_obs(0, make_pool("decode", 2, running_requests=140))])
    assert calm.desired == 2  # 140 / 70
    # A burst: 6 s of 700 in flight after a calm minute -> panic needs 10 >= 2 x 2 ready.
    ticks = [make_obs(t, make_pool("decode", 2, running_requests=100)) for t in range(0, 60, 2)]
    ticks += [make_obs(t, make_pool("decode", 2, running_requests=700)) for t in range(60, 66, 2)]
    out = drive(kpa, ticks)
    assert out[-1].desired == 10 and "panic" in out[-1].reason
    # In panic the pool never shrinks, even when the burst is gone.
    calm_again = [
        make_obs(t, make_pool("decode", 10, running_requests=10)) for t in range(66, 90, 2)
    ]
    state = kpa.initial_state()
    for obs in ticks + calm_again:
        state, dec = kpa.decide(state, obs)
    assert dec.pools["decode"].desired == 10


def _pods(*loads: tuple[float, float]) -> dict[str, PodObservation]:
    return {
        f"p{i}": PodObservation(waiting_requests=q, kv_usage=kv) for i, (kv, q) in enumerate(loads)
    }


def test_llmd_reads_each_pods_peak_over_the_last_minute() -> None:
    llmd = LlmdSaturation(POOLS)
    assert (llmd.interval_s, llmd.decision_interval_s, llmd.peak_window_s) == (15.0, 30.0, 60.0)
    calm = make_pool("decode", 2, pods=_pods((0.45, 0), (0.45, 0)))
    queued = make_pool("decode", 2, pods=_pods((0.45, 4), (0.45, 3)))
    times = [0, 15, 30, 45, 60, 90]
    ticks = [make_obs(t, queued if t == 15 else calm) for t in times]
    out = drive(llmd, ticks)
    # t=15 is a scrape between decisions; at 30 and 60 the gauges are calm, but the
    # minute's peaks (queues 4 and 3, spare queue 1.5 < 3) ask for a replica; at 90 the
    # queued scrape has left the window.
    assert [d.desired for d in out] == [2, 2, 3, 2, 3, 2]
    assert "between decisions" in out[1].reason and "between decisions" in out[3].reason
    # The same decisions on the instantaneous gauges would never have grown the pool.
    instant = LlmdSaturation(POOLS, peak_window_s=1.0)
    assert [d.desired for d in drive(instant, ticks)] == [2] * 6


def test_llmd_saturation_thresholds() -> None:
    llmd = LlmdSaturation(POOLS)
    busy = make_pool("decode", 2, pods=_pods((0.85, 0), (0.75, 1)))  # one saturated, spare KV 0.05
    (up,) = drive(llmd, [make_obs(0, busy)])
    assert up.desired == 3
    pending = replace(busy, replicas=3, ready=2)
    (held,) = drive(llmd, [make_obs(0, pending)])
    assert held.desired == 3  # no cascade while a replica is starting
    idle = make_pool("decode", 3, pods=_pods((0.1, 0), (0.1, 0), (0.2, 0)))
    (down,) = drive(llmd, [make_obs(0, idle)])
    assert down.desired == 2
    ok = make_pool(
        "decode", 2, pods=_pods((0.5, 1), (0.5, 1))
    )  # removing one would leave 0.8-1.0 < 0.1
    (same,) = drive(llmd, [make_obs(0, ok)])
    assert same.desired == 2


class LinearProfile:
    """A profile with round numbers: 10k prompt tok/s per GPU, 0.2 s TTFT; decode ITL
    = 10 ms + 0.2 ms per sequence, so throughput at ITL x is batch/x."""

    def prefill_throughput_per_gpu(self, isl_tokens: float) -> float:
        return 10_000.0

    def expected_ttft_s(self, isl_tokens: float) -> float:
        return 0.2

    def decode_throughput_per_gpu(self, itl_s: float, context_tokens: float) -> float:
        batch = max((itl_s - 0.01) / 0.0002, 0.0)
        return batch / itl_s

    def expected_itl_s(self, batch: float, context_tokens: float) -> float:
        return 0.01 + 0.0002 * batch


def test_dynamo_sla_planner_formulas() -> None:
    pools = {"prefill": PoolConfig("prefill", 1, 50, 1), "decode": PoolConfig("decode", 1, 50, 1)}
    planner = DynamoSlaPlanner(pools, LinearProfile(), LatencyTargets(1.0, 90, 0.05, 90))
    assert planner.interval_s == 180.0
    prefill = prefill_load(2, 30_000)  # 30 req/s of 1000 tokens
    decode = make_pool(
        "decode", 2, running_requests=100, generation_tokens_per_s=6_000, requests_finished_per_s=30
    )
    lat = {"default": LatencyObservation(ttft_s={50: 0.4}, itl_s={50: 0.02}, requests=100)}
    obs = replace(make_obs(0, prefill, decode), latency_by_class=lat)
    _, d = planner.decide(None, obs)
    # prefill: correction 0.4/0.2 = 2 -> min(1, 2) = 1 -> 30k / 10k = 3
    assert d.pools["prefill"].desired == 3
    # decode: expected ITL at batch 50 = 0.02 -> correction 1; at ITL 0.05 batch 200 -> 4000 tok/s
    # per GPU; 30 req/s x 200 tokens = 6000 tok/s -> 2 replicas
    assert d.pools["decode"].desired == 2


def test_tandem_behind_the_common_interface() -> None:
    scaler = TandemAutoscaler(make_config())
    _, d = scaler.decide(
        scaler.initial_state(), make_obs(0, prefill_load(2, 60_000), decode_load(2, 10, 0.1))
    )
    assert d.pools["prefill"].desired == 6 and scaler.interval_s == 15.0
