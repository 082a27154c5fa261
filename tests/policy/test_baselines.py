"""Each baseline against its published formula and defaults."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.observe.types import LatencyObservation, PodObservation
from tandem.policy.baselines import (
    DynamoSlaPlanner,
    Hpa,
    Keda,
    Kpa,
    LlmdSaturation,
    TandemAutoscaler,
)
from tandem.policy.baselines.hpa import compute_hpa_replicas
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


def test_keda_is_ceil_of_total_waiting_over_5() -> None:
    (d,) = drive(Keda(POOLS), [make_obs(0, make_pool("decode", 3, waiting_requests=23))])
    assert d.desired == 5  # ceil(23 / 5)
    assert Keda(POOLS).interval_s == 30.0


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
