"""Selection without HTTP: scores, power of two choices, affinity, health."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.router.selection import (
    EJECT_MAX_S,
    Endpoint,
    compute_affinity_order,
    compute_decode_score,
    compute_prefill_score,
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
