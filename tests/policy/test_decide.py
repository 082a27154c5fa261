"""The autoscaler policy: sizing, stabilization, missing data, reasons, state."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.api.validate import load_inference_service
from tandem.observe.types import LatencyObservation, PoolObservation
from tandem.policy import PolicyState, compute_policy_config, decide
from tandem.policy.config import LatencyTargets, PoolConfig
from tests.factories import make_manifest
from tests.policy.factories import decode_load, make_config, make_obs, make_pool, prefill_load


def run(ticks: list, config=None, state=None):  # type: ignore[no-untyped-def]
    config = config or make_config()
    state = state or PolicyState()
    out = []
    for obs in ticks:
        state, decision = decide(state, obs, config)
        out.append(decision)
    return state, out


def test_prefill_scales_up_for_prompt_demand() -> None:
    # 60k tok/s over 10k per replica at 0.8 utilization -> 8 replicas; step limit 4.
    _, (d,) = run([make_obs(0, prefill_load(2, 60_000), decode_load(2, 10, 0.1))])
    p = d.pools["prefill"]
    assert p.current == 2 and p.desired == 6
    assert "prompt demand 60k tok/s" in p.reason and "step limit 4" in p.reason
    assert d.pools["decode"].desired == 2  # sized independently


def test_decode_worked_example_from_the_docs() -> None:
    config = make_config(
        pools={"decode": PoolConfig("decode", 1, 16, 1, kv_token_capacity=280_000.0)}
    )
    pool = make_pool(
        "decode",
        4,
        kv_usage=0.9,
        running_requests=600,
        generation_tokens_per_s=1000,
        requests_finished_per_s=2.5,
    )
    _, (d,) = run([make_obs(0, pool)], config)
    # used 1.008M + 600 * 400/2 = 1.128M -> / (0.8 * 280k) = 5.04 -> 6
    assert d.pools["decode"].desired == 6
    assert "KV demand 1.13M tokens / (0.8 × 280k per replica)" in d.pools["decode"].reason


def test_backlog_drains_within_a_tick() -> None:
    # 300 waiting prompts of 1000 tokens: 300k tokens to drain in one 15 s tick on top of
    # 8k tok/s arriving = 28k tok/s over 10k per replica -> 3 replicas.
    _, (d,) = run([make_obs(0, prefill_load(2, 8_000, waiting=300), decode_load(2, 10, 0.1))])
    assert d.pools["prefill"].desired == 3
    assert "backlog 300k prompt tokens to drain in 15s" in d.pools["prefill"].reason


def test_a_growing_backlog_counts_as_demand() -> None:
    # A saturated pool processes only its capacity: what arrives beyond it piles up.
    # 4 replicas process 40k tok/s while the backlog grows from 0 to 450k tokens in 15 s:
    # 70k tok/s arrive, plus 450k / 15 s to drain = 100k over 10k per replica -> 10
    # (counting only what was processed would ask for 7).
    config = make_config(step_up=16)
    first = make_obs(0, prefill_load(4, 40_000), decode_load(2, 10, 0.1))
    second = make_obs(15, prefill_load(4, 40_000, waiting=450), decode_load(2, 10, 0.1))
    _, (_, d) = run([first, second], config)
    assert d.pools["prefill"].desired == 10
    assert "backlog 450k prompt tokens" in d.pools["prefill"].reason


def test_measured_ttft_over_target_adds_replicas() -> None:
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1), ttft_s=1.5)
    _, (d,) = run([obs])
    assert (
        d.pools["prefill"].desired == 6 and "TTFT 1.5s over target 1s" in d.pools["prefill"].reason
    )


def test_starting_pods_count_as_capacity_on_its_way() -> None:
    starting = replace(prefill_load(4, 4_000), ready=2, scraped=2)
    _, (d,) = run([make_obs(0, starting, decode_load(2, 10, 0.1), ttft_s=3.0)])
    assert d.pools["prefill"].desired == 4  # no double scale-up during cold start


def test_panic_mode_may_double_the_pool() -> None:
    # 200k tok/s against 4 x 10k: far over twice capacity.
    _, (d,) = run([make_obs(0, prefill_load(8, 200_000), decode_load(2, 10, 0.1))])
    assert d.pools["prefill"].desired == 16 and "panic" in d.pools["prefill"].reason
    assert d.pools["prefill"].driver == "demand" and not d.pools["prefill"].cause


def test_missing_metrics_hold_the_size_and_say_why() -> None:
    broken = make_pool("decode", 3, scraped=2, failed={"chat-decode-x": "timeout after 2s"})
    _, (d,) = run([make_obs(0, prefill_load(2, 1_000), broken)])
    dec = d.pools["decode"]
    assert dec.desired == 3 and not dec.metrics_available and not d.metrics_available
    assert dec.cause == "metrics"
    assert "pod chat-decode-x: timeout after 2s" in dec.reason


def test_failed_scrape_never_scales_to_minimum() -> None:
    high = [
        make_obs(t, prefill_load(8, 60_000), decode_load(8, 900, 0.9)) for t in range(0, 600, 15)
    ]
    blind = [
        make_obs(t, make_pool("prefill", 8, scraped=0), make_pool("decode", 8, scraped=0))
        for t in range(600, 1200, 15)
    ]
    _, decisions = run(high + blind)
    assert all(d.pools["prefill"].desired == 8 for d in decisions[len(high) :])


def test_scale_down_waits_for_the_window() -> None:
    busy = [
        make_obs(t, prefill_load(6, 45_000), decode_load(2, 10, 0.1)) for t in range(0, 300, 15)
    ]
    state, _ = run(busy)
    idle = [
        make_obs(t, prefill_load(6, 1_000), decode_load(2, 10, 0.1)) for t in range(300, 900, 15)
    ]
    _, decisions = run(idle, state=state)
    firsts = [d.pools["prefill"] for d in decisions]
    down_at = next(i for i, p in enumerate(firsts) if p.desired < p.current)
    assert idle[down_at].now_s - 285 >= 300  # the last busy tick was at 285 s
    assert firsts[down_at].desired == 5  # step down 1
    assert {p.cause for p in firsts[:down_at]} == {"window"}
    assert firsts[down_at].cause == ""  # the step-limited need stands


def test_burst_memory_keeps_part_of_the_pool_through_a_quiet_spell() -> None:
    # A burst needs 10 prefill replicas, then traffic stops. Past the scale-down window
    # the pool keeps 0.7 x the remembered peak (balanced), a memory that fades with its
    # half-life (1800 s): at 1200 s, ceil(0.7 x 10 x 0.5^(1200/1800)) = 5.
    config = make_config(step_up=16)
    state, _ = run([make_obs(0, prefill_load(10, 80_000), decode_load(2, 10, 0.1))], config)
    size = 10
    sizes: dict[int, tuple[int, str]] = {}
    for t in range(15, 7200, 15):
        obs = make_obs(t, prefill_load(size, 0), decode_load(2, 10, 0.1))
        state, (d,) = run([obs], config, state=state)
        size = d.pools["prefill"].desired
        sizes[t] = (size, d.pools["prefill"].reason)
    assert sizes[300][0] == 10  # the scale-down window
    assert sizes[1200][0] == 5 and "burst memory: 0.7 × recent peak 6.3" in sizes[1200][1]
    assert sizes[7185][0] == 1  # forgotten


def test_queue_policy_is_keda_like() -> None:
    config = make_config(policy="queue")
    _, (d,) = run(
        [make_obs(0, make_pool("prefill", 2, waiting_requests=23), decode_load(2, 10, 0.95))],
        config,
    )
    assert d.pools["prefill"].desired == 5  # ceil(23 / 5)
    assert d.pools["decode"].desired == 3  # ceil(0.95 * 2 / 0.8)


def test_static_policy_never_moves() -> None:
    _, (d,) = run(
        [make_obs(0, prefill_load(2, 90_000), decode_load(2, 900, 0.99))],
        make_config(policy="static"),
    )
    assert all(p.desired == 2 for p in d.pools.values())
    assert all(p.cause == "static" for p in d.pools.values())


def test_strictest_class_with_traffic_decides() -> None:
    config = make_config(
        class_targets={
            "interactive": LatencyTargets(0.3, 90, 0.03, 90),
            "batch": LatencyTargets(10, 90, 0.2, 90),
        }
    )
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1))
    quiet_strict = replace(
        obs,
        latency_by_class={
            "interactive": LatencyObservation(ttft_s={90: 0.6}, requests=0),
            "batch": LatencyObservation(ttft_s={90: 0.6}, requests=50),
        },
    )
    busy_strict = replace(
        obs,
        latency_by_class={
            "interactive": LatencyObservation(ttft_s={90: 0.6}, requests=10),
            "batch": LatencyObservation(ttft_s={90: 0.6}, requests=50),
        },
    )
    _, (quiet,) = run([quiet_strict], config)
    _, (busy,) = run([busy_strict], config)
    assert quiet.pools["prefill"].desired == 4
    assert busy.pools["prefill"].desired == 8  # 0.6 s against 0.3 s: doubled


def test_ratio_bounds_raise_the_smaller_pool() -> None:
    config = make_config(ratio_min=0.5)
    _, (d,) = run([make_obs(0, prefill_load(1, 1_000), decode_load(6, 800, 0.5))], config)
    assert d.pools["prefill"].desired >= 0.5 * d.pools["decode"].desired
    assert "ratio min 0.5" in d.pools["prefill"].reason
    assert d.pools["prefill"].cause == "ratio"


def test_prefill_capacity_is_learned_while_saturated() -> None:
    config = make_config(pools={"prefill": PoolConfig("prefill", 1, 32, 1)})  # no profile
    ticks = [make_obs(t, prefill_load(4, 80_000, waiting=8)) for t in range(0, 150, 15)]
    state, _ = run(ticks, config)
    learned = state.pool("prefill").learned_capacity
    assert learned == pytest.approx(20_000, rel=0.05)


def test_state_round_trips_through_status() -> None:
    ticks = [
        make_obs(t, prefill_load(4, 30_000 + 100 * t), decode_load(3, 300, 0.6))
        for t in range(0, 300, 15)
    ]
    state, _ = run(ticks)
    restored = PolicyState.from_dict(state.to_dict())
    nxt = make_obs(300, prefill_load(4, 1_000), decode_load(3, 10, 0.1))
    assert decide(restored, nxt, make_config())[1] == decide(state, nxt, make_config())[1]
    assert (
        PolicyState.from_dict({"pools": {"prefill": {"recommendations": "junk"}}})
        .pool("prefill")
        .recommendations
        == ()
    )


def test_config_from_an_inference_service() -> None:
    isvc = load_inference_service(
        make_manifest(prefill_max=5, qos={"ttft": {"p99": "2s"}, "objective": "throughput"})
    )
    config = compute_policy_config(isvc)
    assert config.pools["prefill"].max_replicas == 5 and config.targets.ttft_s == 2.0
    assert config.targets.ttft_percentile == 99 and config.utilization == 0.9


loads = st.tuples(st.floats(0, 400_000), st.floats(0, 200), st.floats(0, 2_000), st.floats(0, 1))


@settings(max_examples=200, deadline=None)
@given(st.lists(loads, min_size=1, max_size=30), st.integers(1, 16))
def test_always_within_bounds(series: list[tuple[float, float, float, float]], start: int) -> None:
    config = make_config()
    state, n_pre, n_dec = PolicyState(), start, start
    for i, (tok, wait, running, kv) in enumerate(series):
        obs = make_obs(i * 15.0, prefill_load(n_pre, tok, wait), decode_load(n_dec, running, kv))
        state, d = decide(state, obs, config)
        n_pre, n_dec = d.pools["prefill"].desired, d.pools["decode"].desired
        assert 1 <= n_pre <= 16 and 1 <= n_dec <= 16


@settings(max_examples=150, deadline=None)
@given(loads, loads, st.integers(1, 12))
def test_monotone_in_load(a: tuple[float, ...], b: tuple[float, ...], n: int) -> None:
    lo, hi = (a, b) if a[0] <= b[0] else (b, a)
    hi = tuple(max(x, y) for x, y in zip(lo, hi, strict=True))
    _, (d_lo,) = run([make_obs(0, prefill_load(n, lo[0], lo[1]), decode_load(n, lo[2], lo[3]))])
    _, (d_hi,) = run([make_obs(0, prefill_load(n, hi[0], hi[1]), decode_load(n, hi[2], hi[3]))])
    for role in ("prefill", "decode"):
        assert d_hi.pools[role].desired >= d_lo.pools[role].desired


@settings(max_examples=100, deadline=None)
@given(loads, st.integers(1, 16))
def test_no_oscillation_on_constant_load(
    load: tuple[float, float, float, float], start: int
) -> None:
    config = make_config()
    state, n_pre, n_dec = PolicyState(), start, start
    history: dict[str, list[int]] = {"prefill": [], "decode": []}
    for i in range(60):
        obs = make_obs(
            i * 15.0, prefill_load(n_pre, load[0], load[1]), decode_load(n_dec, load[2], load[3])
        )
        state, d = decide(state, obs, config)
        n_pre, n_dec = d.pools["prefill"].desired, d.pools["decode"].desired
        for role in history:
            history[role].append(d.pools[role].desired)
    for sizes in history.values():
        steps = [b - a for a, b in itertools.pairwise(sizes) if b != a]
        assert all(s > 0 for s in steps) or all(s < 0 for s in steps), sizes


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 16), st.floats(0, 1))
def test_no_scale_down_inside_the_window(n: int, kv: float) -> None:
    config = make_config()
    state, _ = run([make_obs(0, prefill_load(n, 5_000 * n), decode_load(n, 50 * n, kv))], config)
    for t in range(15, 300, 15):
        state, d = decide(state, make_obs(t, prefill_load(n, 0), decode_load(n, 0, 0)), config)
        assert all(p.desired >= p.current for p in d.pools.values()), t


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_signals_hold_instead_of_scaling_down(value: float) -> None:
    pool = replace(decode_load(6, 10, 0.1), kv_usage=value)
    _, (d,) = run([make_obs(0, prefill_load(2, 1_000), pool)])
    assert d.pools["decode"].desired == 6 and not d.pools["decode"].metrics_available
    assert "kv_usage is" in d.pools["decode"].reason


@pytest.mark.parametrize(
    ("pool", "cfg", "traffic", "desired", "cause"),
    [
        (prefill_load(0, 0), PoolConfig("prefill", 0, 4, 0), 500.0, 1, "traffic"),
        (prefill_load(0, 0), PoolConfig("prefill", 2, 4, 0), 0.0, 2, "min"),
        (prefill_load(0, 0), PoolConfig("prefill", 0, 4, 0), 0.0, 0, "idle"),
        (prefill_load(1, 0), PoolConfig("prefill", 2, 4, 1), 0.0, 2, "min"),  # min raised
        (prefill_load(6, 90_000), PoolConfig("prefill", 1, 4, 1), 0.0, 4, "max"),  # max cut
    ],
)
def test_a_bound_or_the_traffic_names_itself_as_the_cause(
    pool: PoolObservation, cfg: PoolConfig, traffic: float, desired: int, cause: str
) -> None:
    config = make_config(pools={"prefill": cfg})
    obs = make_obs(0, pool, arrival_prompt_tokens_per_s=traffic)
    _, (d,) = run([obs], config)
    assert (d.pools["prefill"].desired, d.pools["prefill"].cause) == (desired, cause)


def test_panic_holds_a_scale_down_and_says_so() -> None:
    state, _ = run([make_obs(0, prefill_load(8, 200_000), decode_load(2, 10, 0.1))])
    _, (d,) = run([make_obs(15, prefill_load(16, 1_000), decode_load(2, 10, 0.1))], state=state)
    assert d.pools["prefill"].desired == 16 and d.pools["prefill"].cause == "panic"


# -- feasibility: the latency rule sizes on queueing of requests that can meet the target


def _judged(ttft_s: float, queueing: float | None, feasible: float, **infeasible: float):  # type: ignore[no-untyped-def]
    """Router latency with the feasibility accounting: 100 requests in the window."""
    return LatencyObservation(
        ttft_s={90: ttft_s},
        itl_s={90: 0.02},
        requests=100.0,
        queueing_ratio={90: queueing} if queueing is not None else {},
        feasible_requests=feasible,
        infeasible_requests=infeasible,
    )


def test_queueing_over_the_budget_of_feasible_requests_adds_replicas() -> None:
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1))
    obs = replace(obs, latency_by_class={"default": _judged(1.2, 1.5, 90.0)})
    _, (d,) = run([obs])
    assert d.pools["prefill"].desired == 6 and d.pools["prefill"].driver == "latency"
    assert "TTFT queueing at 1.5x the budget" in d.pools["prefill"].reason
    assert d.pools["prefill"].signals["queueing_ratio"] == 1.5


def test_service_time_over_target_adds_nothing() -> None:
    """TTFT p90 of 6 s, but the requests that can meet 1 s waited within their budget:
    the rest is prefill time that no replica count shortens."""
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1))
    obs = replace(obs, latency_by_class={"default": _judged(6.0, 0.6, 80.0, ttft=20.0)})
    _, (d,) = run([obs])
    assert d.pools["prefill"].desired == 4 and d.pools["prefill"].driver != "latency"


def test_a_class_with_no_feasible_request_gives_no_latency_signal() -> None:
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1))
    obs = replace(obs, latency_by_class={"default": _judged(30.0, None, 0.0, ttft=100.0)})
    _, (d,) = run([obs])
    assert d.pools["prefill"].desired == 4


def test_an_itl_target_below_the_least_itl_adds_no_decode_replicas() -> None:
    slow = LatencyObservation(
        itl_s={90: 0.2}, requests=50.0, infeasible_requests={"itl": 50.0}, feasible_requests=0.0
    )
    obs = replace(make_obs(0, prefill_load(2, 1_000), decode_load(4, 40, 0.2)))
    _, (feasible,) = run(
        [replace(obs, latency_by_class={"default": replace(slow, infeasible_requests={})})]
    )
    _, (infeasible,) = run([replace(obs, latency_by_class={"default": slow})])
    assert feasible.pools["decode"].desired == 8  # 0.2 s against 0.05 s: doubled
    assert infeasible.pools["decode"].desired == 4


def test_absorbed_prompts_count_as_prefill_demand() -> None:
    base = make_obs(0, prefill_load(2, 8_000), decode_load(2, 10, 0.1))
    _, (plain,) = run([base])
    _, (absorbed,) = run([replace(base, absorbed_prompt_tokens_per_s=40_000.0)])
    # 8k tok/s over 0.8 x 10k: 1 replica; with 40k tok/s absorbed by decode: 6.
    assert plain.pools["prefill"].desired == 2  # held by the scale-down window
    assert absorbed.pools["prefill"].desired == 6
    assert absorbed.pools["decode"].desired == plain.pools["decode"].desired


def test_the_window_s_requests_are_kept_in_status() -> None:
    obs = make_obs(0, prefill_load(4, 4_000), decode_load(2, 10, 0.1))
    obs = replace(
        obs,
        latency_by_class={"default": _judged(2.0, 0.5, 60.0, ttft=30.0, itl=3.0)},
        absorbed_requests_per_s=2.0,
        absorbed_prompt_tokens_per_s=3_000.0,
    )
    state, (d,) = run([obs])
    # and in the signals the operator exports (tandem_autoscaler_signal)
    assert d.pools["prefill"].signals["infeasible_per_s"] == 2.0
    assert d.pools["prefill"].signals["absorbed_prompt_tokens_per_s"] == 3_000.0
    assert d.pools["decode"].signals["infeasible_per_s"] == pytest.approx(0.2)
    tally = state.to_dict()["requests"]
    assert tally == {
        "window_s": 15.0,
        "per_s": pytest.approx(100 / 15),
        "infeasible_per_s": {"ttft": 2.0, "itl": 0.2},
        "absorbed_per_s": 2.0,
        "absorbed_prompt_tokens_per_s": 3_000.0,
    }
    assert PolicyState.from_dict(state.to_dict()) == state
    assert PolicyState.from_dict({"pools": {}, "requests": "junk"}).requests.per_s == 0.0


def _without_latency(obs):  # type: ignore[no-untyped-def]
    return replace(obs, latency_by_class={})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(loads, st.floats(1.0, 120.0), st.floats(0, 500)), min_size=1, max_size=25),
    st.integers(1, 16),
)
def test_an_all_infeasible_workload_is_sized_for_its_throughput_only(
    series: list[tuple[tuple[float, float, float, float], float, float]], start: int
) -> None:
    """Whatever TTFT and ITL requests no pool size could serve in time report, every pool
    gets exactly what the same load without any latency signal gets: never more."""
    config = make_config()
    judged, bare = PolicyState(), PolicyState()
    n_pre = n_dec = start
    for i, ((tok, wait, running, kv), ttft_s, count) in enumerate(series):
        obs = make_obs(i * 15.0, prefill_load(n_pre, tok, wait), decode_load(n_dec, running, kv))
        infeasible = LatencyObservation(
            ttft_s={90: ttft_s},
            itl_s={90: ttft_s / 10},
            requests=count,
            feasible_requests=0.0,
            infeasible_requests={"ttft": count, "itl": count},
        )
        judged, d = decide(judged, replace(obs, latency_by_class={"default": infeasible}), config)
        bare, want = decide(bare, _without_latency(obs), config)
        for role in ("prefill", "decode"):
            assert d.pools[role].desired == want.pools[role].desired, (i, role)
        n_pre, n_dec = d.pools["prefill"].desired, d.pools["decode"].desired


def test_decode_sizes_on_the_work_arriving_while_requests_wait_for_capacity() -> None:
    # Prefill finishes 80 req/s; decode generates 2k tok/s (100 running, 200 tokens per
    # request): saturated, it generates its capacity, not the 16k tok/s handed to it.
    def decide_decode(waiting: float, for_capacity: float | None) -> tuple[int, str]:
        decode = replace(
            decode_load(2, 100, 0.3, waiting=waiting), waiting_for_capacity=for_capacity
        )
        _, (d,) = run([make_obs(0, prefill_load(2, 80_000), decode)], make_config(step_up=16))
        return d.pools["decode"].desired, d.pools["decode"].reason

    # 16k / (0.9 x 5.12k tok/s per replica at batch 256 within 50 ms) = 3.5 -> 4
    assert decide_decode(20, 20) == (
        4,
        "decode 2→4: 16k tok/s arriving from prefill / (0.9 × 5.12k tok/s per replica at "
        "batch 256 within ITL 0.05s)",
    )
    # Requests pulling their KV wait too, but not for room: no replicas for them, nor
    # when the engines do not say why their requests wait (vLLM before 0.32).
    for waiting, for_capacity in ((0, 0), (20, 0), (20, None)):
        desired, reason = decide_decode(waiting, for_capacity)
        assert desired == 2 and "KV demand" in reason


def test_decode_queue_counts_only_requests_waiting_for_room() -> None:
    # 32 running and 40 waiting at a batch of 16 within ITL: 72 / 16 = 4.5 -> 5 replicas
    # when the 40 wait for room; none for them when they are pulling their KV (they hold
    # its blocks already); all of them when the engines do not say why they wait.
    pools = {
        "prefill": PoolConfig("prefill", 1, 16, 1, prefill_tokens_per_s=10_000.0),
        "decode": PoolConfig(
            "decode", 1, 16, 1, kv_token_capacity=100_000.0, max_num_seqs=256, max_batch_at_itl=16
        ),
    }

    def decide_decode(for_capacity: float | None) -> tuple[int, str]:
        decode = replace(decode_load(2, 32, 0.3, waiting=40), waiting_for_capacity=for_capacity)
        config = make_config(pools=pools, step_up=16)
        _, (d,) = run([make_obs(0, prefill_load(2, 1_000), decode)], config)
        return d.pools["decode"].desired, d.pools["decode"].reason

    assert decide_decode(40) == (
        5,
        "decode 2→5: 72 sequences (40 waiting for capacity) / batch 16 within ITL",
    )
    assert decide_decode(None) == (5, "decode 2→5: 72 sequences (40 waiting) / batch 16 within ITL")
    # 640 tok/s / (0.9 x 16 x 1 / 0.05 s) = 2.2 -> 3
    assert decide_decode(0) == (
        3,
        "decode 2→3: 640 tok/s / (0.9 × 320 tok/s per replica at batch 16 within ITL 0.05s)",
    )
