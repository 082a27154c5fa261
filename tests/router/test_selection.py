"""Selection without HTTP: scores, power of two choices, affinity, health."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.router.selection import (
    ABSORB_GAP_SHARE,
    ABSORB_MAX_STALL_ITL,
    EJECT_MAX_S,
    Endpoint,
    compute_absorb_free_at_s,
    compute_affinity_order,
    compute_decode_score,
    compute_prefill_score,
    compute_prefill_wait_s,
    pick_absorber,
    pick_decode,
    pick_pool,
    pick_prefill,
    pick_two_choices,
)


def make_endpoints(n: int, role: str = "prefill") -> list[Endpoint]:
    return [Endpoint(url=f"http://10.0.0.{i}:8000", role=role) for i in range(n)]


def test_prefill_score_counts_other_routers_queue_at_mean_prompt_size() -> None:
    e = Endpoint("http://a", "prefill", outstanding_requests=2, outstanding_prompt_tokens=3000)
    e.record_scrape(waiting=5, running=0, kv_usage=0.1)
    assert compute_prefill_score(e, mean_prompt_tokens=1000) == 6000


def test_own_requests_in_a_stale_scrape_are_not_counted_twice() -> None:
    e = Endpoint("http://a", "prefill", outstanding_requests=4, outstanding_prompt_tokens=800)
    e.record_scrape(waiting=4, running=0, kv_usage=0.0)  # all four were ours
    e.outstanding_requests, e.outstanding_prompt_tokens = 0, 0  # and they finished since
    assert compute_prefill_score(e, mean_prompt_tokens=1000) == 0


def test_decode_score_weighs_kv_usage_and_sequences() -> None:
    e = Endpoint("http://a", "decode", outstanding_requests=10)
    e.record_scrape(waiting=2, running=20, kv_usage=0.4)
    e.outstanding_requests = 12
    assert compute_decode_score(e) == 0.4 * 100 + 12 + (22 - 10)


def test_prefill_picks_least_outstanding_tokens_of_two() -> None:
    a, b = make_endpoints(2)
    a.outstanding_prompt_tokens = 10_000
    for seed in range(20):
        chosen = pick_prefill([a, b], now_s=0, rng=random.Random(seed), mean_prompt_tokens=500)
        assert chosen is b


def test_a_short_prompt_never_queues_behind_a_long_one_while_a_shorter_queue_exists() -> None:
    pool = make_endpoints(8)
    pool[3].outstanding_prompt_tokens = 100_000  # a long prompt
    for e in pool[:3] + pool[4:]:
        e.outstanding_prompt_tokens = 2_000
    pool[6].outstanding_prompt_tokens = 500
    for seed in range(30):
        rng = random.Random(seed)
        assert pick_prefill(pool, now_s=0, rng=rng, mean_prompt_tokens=1000) is pool[6]


def test_prefill_ties_are_broken_at_random() -> None:
    pool = make_endpoints(4)
    seen = set()
    for seed in range(40):
        chosen = pick_prefill(pool, now_s=0, rng=random.Random(seed), mean_prompt_tokens=1)
        assert chosen is not None
        seen.add(chosen.url)
    assert seen == {e.url for e in pool}


def test_expected_wait_is_queued_tokens_over_the_rate() -> None:
    e = Endpoint("http://a", "prefill", outstanding_requests=1, outstanding_prompt_tokens=20_000)
    e.record_scrape(waiting=3, running=0, kv_usage=0.0)  # two of another router's prompts
    assert compute_prefill_wait_s(e, mean_prompt_tokens=1_000, tokens_per_s=11_000) == 2.0


def test_decode_prefers_lower_kv_usage() -> None:
    a, b = make_endpoints(2, "decode")
    a.record_scrape(waiting=0, running=10, kv_usage=0.9)
    b.record_scrape(waiting=0, running=10, kv_usage=0.2)
    assert pick_decode([a, b], now_s=0, rng=random.Random(1)) is b


def test_two_choices_spreads_a_burst_without_feedback() -> None:
    """With router-side accounting a burst spreads over every engine."""
    pool = make_endpoints(8, "decode")
    rng = random.Random(7)
    for _ in range(800):
        chosen = pick_decode(pool, now_s=0, rng=rng)
        assert chosen is not None
        chosen.outstanding_requests += 1
    loads = [e.outstanding_requests for e in pool]
    assert max(loads) - min(loads) <= 3, loads


def test_ejected_endpoint_is_skipped_until_backoff_ends() -> None:
    a, b = make_endpoints(2)
    a.record_failure(now_s=100.0)
    for seed in range(20):
        assert pick_prefill([a, b], now_s=100.5, rng=random.Random(seed), mean_prompt_tokens=1) is b
    assert a.healthy(101.0)


def test_backoff_doubles_and_is_capped() -> None:
    e = make_endpoints(1)[0]
    now_s, backoffs = 0.0, []
    for _ in range(8):  # each failure on the first request after the last ejection ended
        e.record_failure(now_s=now_s)
        backoffs.append(e.ejected_until_s - now_s)
        now_s = e.ejected_until_s
    assert backoffs == [1, 2, 4, 8, 16, EJECT_MAX_S, EJECT_MAX_S, EJECT_MAX_S]
    e.record_success()
    assert e.healthy(now_s)


def test_failed_scrape_makes_unhealthy_and_all_unhealthy_falls_back() -> None:
    a, b = make_endpoints(2)
    a.scrape_ok = False
    assert pick_prefill([a, b], now_s=0, rng=random.Random(0), mean_prompt_tokens=1) is b
    b.scrape_ok = False
    assert pick_prefill([a, b], now_s=0, rng=random.Random(0), mean_prompt_tokens=1) is not None


def test_exclude_gives_another_endpoint_or_none() -> None:
    a, b = make_endpoints(2)
    chosen = pick_prefill(
        [a, b], now_s=0, rng=random.Random(0), mean_prompt_tokens=1, exclude=frozenset({a.url})
    )
    assert chosen is b
    assert pick_decode([a], now_s=0, rng=random.Random(0), exclude=frozenset({a.url})) is None


def test_prefix_affinity_is_stable_and_spreads_prefixes() -> None:
    pool = make_endpoints(4)
    chosen = Counter()
    for i in range(400):
        key = f"system prompt {i}".encode()
        first = pick_prefill(
            pool, now_s=0, rng=random.Random(i), mean_prompt_tokens=1, affinity_key=key
        )
        again = pick_prefill(
            pool, now_s=0, rng=random.Random(i + 1), mean_prompt_tokens=1, affinity_key=key
        )
        assert first is again
        assert first is not None
        chosen[first.url] += 1
    assert all(count > 50 for count in chosen.values()), chosen


def test_affinity_spills_when_the_affine_engine_is_overloaded() -> None:
    pool = make_endpoints(4)
    key = b"a shared system prompt"
    favourite, second = compute_affinity_order(key, pool)[:2]
    favourite.outstanding_prompt_tokens = 1_000_000
    chosen = pick_prefill(
        pool, now_s=0, rng=random.Random(0), mean_prompt_tokens=1, affinity_key=key
    )
    assert chosen is second


def test_removing_an_engine_moves_only_its_keys() -> None:
    pool = make_endpoints(5)
    keys = [f"k{i}".encode() for i in range(300)]
    before = {k: compute_affinity_order(k, pool)[0].url for k in keys}
    gone = pool[2].url
    after = {k: compute_affinity_order(k, pool[:2] + pool[3:])[0].url for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == gone for k in moved)


def test_aggregated_pool_uses_affinity_and_load() -> None:
    pool = make_endpoints(3, "pool")
    key = b"prefix"
    favourite = compute_affinity_order(key, pool)[0]
    rng = random.Random(0)
    assert pick_pool(pool, now_s=0, rng=rng, mean_prompt_tokens=100, affinity_key=key) is favourite


endpoint_states = st.builds(
    lambda i, req, tok, waiting, running, kv, ok, ejected: Endpoint(
        url=f"http://e{i}",
        role="decode",
        outstanding_requests=req,
        outstanding_prompt_tokens=tok,
        scraped_waiting=waiting,
        scraped_running=running,
        scraped_kv_usage=kv,
        scrape_ok=ok,
        ejected_until_s=ejected,
    ),
    st.integers(0, 10_000),
    st.integers(0, 500),
    st.integers(0, 200_000),
    st.none() | st.floats(0, 1000),
    st.none() | st.floats(0, 1000),
    st.none() | st.floats(0, 1),
    st.booleans(),
    st.sampled_from([0.0, 50.0]),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(endpoint_states, max_size=12, unique_by=lambda e: e.url),
    st.integers(0, 2**32),
    st.binary(max_size=16),
)
def test_picks_are_members_and_healthy_when_any_is(
    pool: list[Endpoint], seed: int, key: bytes
) -> None:
    now_s = 10.0
    healthy = [e for e in pool if e.healthy(now_s)]
    for pick in (
        pick_decode(pool, now_s=now_s, rng=random.Random(seed)),
        pick_prefill(
            pool, now_s=now_s, rng=random.Random(seed), mean_prompt_tokens=512, affinity_key=key
        ),
        pick_pool(pool, now_s=now_s, rng=random.Random(seed), mean_prompt_tokens=512),
    ):
        if not pool:
            assert pick is None
            continue
        assert pick in pool
        if healthy:
            assert pick in healthy


@settings(max_examples=100, deadline=None)
@given(
    st.lists(endpoint_states, min_size=2, max_size=12, unique_by=lambda e: e.url),
    st.integers(0, 2**32),
)
def test_two_choices_never_picks_the_worst_of_several(pool: list[Endpoint], seed: int) -> None:
    """P2C picks the better of two, so the strictly worst endpoint is never chosen."""
    scores = {e.url: compute_decode_score(e) for e in pool}
    worst = max(scores.values())
    if list(scores.values()).count(worst) > 1:
        return
    chosen = pick_two_choices(pool, scores, random.Random(seed))
    assert chosen is not None and scores[chosen.url] < worst


# -- absorbing a prefill burst on decode engines


def absorb_case(
    prefill_backlog: int = 30_000, gap_s: float | None = 0.015
) -> tuple[list[Endpoint], list[Endpoint]]:
    """The docstring's worked example: prefill queues of 30k and 45k tokens, a decode
    engine at 15 ms a token and an idle one, under TTFT 1 s / ITL 50 ms at 25k tok/s."""
    prefill = make_endpoints(2)
    prefill[0].outstanding_prompt_tokens = prefill_backlog
    prefill[1].outstanding_prompt_tokens = prefill_backlog + 15_000
    busy, idle = make_endpoints(2, "decode")
    busy.recent_gap_s, busy.outstanding_requests = gap_s, 40
    idle.recent_gap_s = gap_s
    return prefill, [busy, idle]


def absorber(prefill: list[Endpoint], decode: list[Endpoint], prompt: int = 2_000, **kw: float):  # type: ignore[no-untyped-def]
    args = {"now_s": 0.0, "tokens_per_s": 25_000.0, "ttft_target_s": 1.0, "itl_target_s": 0.05}
    args.update(kw)
    return pick_absorber(prefill, decode, prompt_tokens=prompt, mean_prompt_tokens=1_000.0, **args)


def test_a_burst_the_prefill_pool_cannot_take_in_time_goes_to_the_least_loaded_decode() -> None:
    prefill, decode = absorb_case()
    assert absorber(prefill, decode) is decode[1]


def test_an_engine_with_streams_absorbs_again_after_enough_of_their_steps() -> None:
    _, (busy, idle) = absorb_case()
    # p90: absorbed prefills take at most half the tenth of gaps that may be slow, so one
    # stalled step in twenty: the stall, then 19 steps of 15 ms.
    assert compute_absorb_free_at_s(busy, 0.0, 2_000, 25_000.0, 90) == pytest.approx(
        0.08 + 19 * 0.015
    )
    assert compute_absorb_free_at_s(busy, 0.0, 2_000, 25_000.0, 99) == pytest.approx(
        0.08 + 199 * 0.015
    )
    # no streams to stall: free at once (its own absorbed prompts queue in order)
    assert compute_absorb_free_at_s(idle, 5.0, 2_000, 25_000.0, 90) == 5.0


def test_no_absorption_while_the_prefill_pool_keeps_the_target() -> None:
    prefill, decode = absorb_case(prefill_backlog=20_000)  # 0.8 + 0.08 s < 1 s
    assert absorber(prefill, decode) is None


def test_no_absorption_of_a_prompt_that_would_stall_the_streams_long() -> None:
    prefill, decode = absorb_case()
    stall_tokens = int(ABSORB_MAX_STALL_ITL * 0.05 * 25_000)
    assert absorber(prefill, decode, prompt=stall_tokens) is not None
    assert absorber(prefill, decode, prompt=stall_tokens + 100) is None


def test_no_absorption_on_an_engine_near_its_itl_target() -> None:
    prefill, decode = absorb_case(gap_s=ABSORB_GAP_SHARE * 0.05 * 1.1)
    decode[1].outstanding_requests = 3
    assert absorber(prefill, decode) is None
    decode[1].outstanding_requests = 0  # its streams ended: nothing left to stall
    assert absorber(prefill, decode) is decode[1]


def test_an_engine_absorbs_again_only_after_its_duty_spacing() -> None:
    prefill, decode = absorb_case()
    decode[1].absorb_free_at_s = 0.4
    assert absorber(prefill, decode) is decode[0]
    decode[0].absorb_free_at_s = 0.4
    assert absorber(prefill, decode) is None
    assert absorber(prefill, decode, now_s=0.4) is decode[1]


def test_no_absorption_onto_a_queue_or_a_sick_engine_or_without_targets() -> None:
    prefill, decode = absorb_case()
    decode[1].record_scrape(waiting=1, running=3, kv_usage=0.2)
    decode[0].record_failure(now_s=0.0)
    assert absorber(prefill, decode) is None
    prefill, decode = absorb_case()
    assert absorber(prefill, decode, ttft_target_s=0.0) is None
    assert absorber(prefill, decode, itl_target_s=0.0) is None
    assert absorber(prefill, decode, tokens_per_s=0.0) is None


def test_no_absorption_that_would_not_be_sooner() -> None:
    prefill, decode = absorb_case(prefill_backlog=24_000)  # via prefill: 0.96 + 0.08 s
    for e in decode:
        e.absorbed_prompt_tokens = 24_000  # absorbed prompts ahead: 0.96 + 0.08 s too
    assert absorber(prefill, decode) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(endpoint_states, min_size=1, max_size=6, unique_by=lambda e: e.url),
    st.lists(endpoint_states, min_size=1, max_size=6, unique_by=lambda e: e.url),
    st.integers(1, 20_000),
    st.floats(1_000, 100_000),
    st.floats(0.05, 5),
    st.floats(0.005, 0.2),
)
def test_an_absorber_is_always_a_free_decode_engine_and_absorbing_is_sooner(
    prefill: list[Endpoint],
    decode: list[Endpoint],
    prompt: int,
    rate: float,
    ttft_s: float,
    itl_s: float,
) -> None:
    now_s = 10.0
    chosen = pick_absorber(
        prefill,
        decode,
        prompt_tokens=prompt,
        now_s=now_s,
        mean_prompt_tokens=512.0,
        tokens_per_s=rate,
        ttft_target_s=ttft_s,
        itl_target_s=itl_s,
    )
    healthy = [e for e in prefill if e.healthy(now_s)]
    waits = [compute_prefill_wait_s(e, 512.0, rate) for e in healthy]
    via_prefill = min(waits, default=0.0) + prompt / rate
    if chosen is None:
        return
    assert chosen in decode and chosen.healthy(now_s) and not chosen.scraped_waiting
    assert healthy and via_prefill > ttft_s
    assert prompt / rate <= ABSORB_MAX_STALL_ITL * itl_s
    assert (chosen.absorbed_prompt_tokens + prompt) / rate < via_prefill
