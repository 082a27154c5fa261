"""Choosing an engine for each leg: load scores, power of two choices, prefix affinity. Pure.

Each engine is an :class:`Endpoint`: what this router has sent it and not yet seen
finish (exact, updated per request) and what its ``/metrics`` said at the last scrape
(approximate, up to one scrape interval old, but it includes the load other router
replicas put on it). Scores combine the two; lower is better.

Power of two choices: compare two engines drawn at random among the healthy ones and
take the better. It keeps the load spread almost as well as "always the least loaded"
while never sending a whole burst to the one engine that looked idlest at the last
scrape (the herd effect of stale load figures). Prefill is the exception: a prompt goes
to the engine whose queue it would wait least behind (queued prompt tokens over the
rate one replica prefills), so a long prompt queued on one engine never holds a short
one behind it while another engine's queue is shorter; the router's own counts are
exact and bump at once, so a burst still spreads.

**Absorbing a burst** (:func:`pick_absorber`): when the prefill pool's expected wait
would take a prompt past its TTFT target and a decode engine has inter-token slack, the
router sends the whole request to that decode engine, which prefills it itself (no
``kv_transfer_params``: vLLM prefills locally), as a mixed pool does in Splitwise. Its
streams pay one longer step for it, so the engine must be well inside its ITL target,
the stall short, and its absorptions spaced by its streams' steps
(:data:`ABSORB_SLOW_GAP_SHARE`).

Nothing here does I/O or reads a clock: callers pass ``now_s`` and a ``random.Random``.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

#: Weight of KV-cache usage (0-1) in the decode score, in sequences: a full cache
#: weighs as much as 100 more running sequences, so 1 % of KV ~ one sequence.
KV_USAGE_WEIGHT = 100.0
#: Ejection after consecutive request failures: first 1 s, doubling, at most 30 s.
EJECT_BASE_S = 1.0
EJECT_MAX_S = 30.0
#: Prefix affinity keeps the hashed engine unless its prefill load exceeds the mean
#: of the candidates by this factor plus this many tokens (bounded-load hashing).
AFFINITY_LOAD_FACTOR = 1.5
AFFINITY_SLACK_TOKENS = 4096
#: The same slack for aggregated engines, whose score is in sequences.
AFFINITY_SLACK_SEQUENCES = 8.0
#: A decode engine may absorb a prefill while its recent mean token gap is at most this
#: share of the ITL target: at half, one stalled step in a stream of dozens keeps the
#: stream's mean gap within target.
ABSORB_GAP_SHARE = 0.5
#: The longest prefill a decode engine absorbs, in ITL targets: the step its streams
#: wait for it (about the prompt over the prefill rate) stays this short.
ABSORB_MAX_STALL_ITL = 2.0
#: Of the token gaps the ITL target's percentile lets be slow (a tenth for p90), the
#: share absorbed prefills may take: a decode engine with streams absorbs again only
#: after as many of their steps (p90: 19 after each stalled one), so the percentile
#: stays the streams' own.
ABSORB_SLOW_GAP_SHARE = 0.5
#: Weight of each new token gap in a decode engine's recent mean gap.
GAP_EWMA_WEIGHT = 0.05


@dataclass
class Endpoint:
    """One engine as the router sees it. Mutated only by the router's event loop."""

    url: str
    role: str
    outstanding_requests: int = 0
    """Requests this router sent and has not seen finish."""
    outstanding_prompt_tokens: int = 0
    """Estimated prompt tokens of this router's requests still in prefill on it."""
    scraped_waiting: float | None = None
    """``vllm:num_requests_waiting`` at the last scrape (all routers' requests)."""
    scraped_running: float | None = None
    """``vllm:num_requests_running`` at the last scrape."""
    scraped_kv_usage: float | None = None
    """``vllm:kv_cache_usage_perc`` (0-1) at the last scrape."""
    requests_at_scrape: int = 0
    """``outstanding_requests`` when the last scrape answered: the part of the scraped
    queue that was this router's own, so the rest is other routers' load."""
    scrape_ok: bool = True
    """The last scrape answered; a failing scrape marks the engine unhealthy."""
    consecutive_failures: int = 0
    ejected_until_s: float = 0.0
    """Monotonic time before which the engine is not chosen after request failures."""
    tokens_total: float | None = None
    """The engine's processed-token counters at the last scrape that had them."""
    progress_s: float = float("-inf")
    """Monotonic time of the last scrape that saw those counters move."""
    counted_s: float = float("-inf")
    """Monotonic time of the last scrape that read those counters, moved or not."""
    recent_gap_s: float | None = None
    """Decode engines: a running mean of the token gaps of the streams relayed from it
    (``None`` before any): how close it runs to the ITL target."""
    absorbed_prompt_tokens: int = 0
    """Decode engines: prompt tokens of absorbed requests not yet at their first token."""
    absorb_free_at_s: float = 0.0
    """Decode engines: monotonic time before which it absorbs no other prefill."""

    def healthy(self, now_s: float) -> bool:
        return self.scrape_ok and now_s >= self.ejected_until_s

    def record_failure(self, now_s: float) -> None:
        """A request failed on this engine (connect error, 5xx, timeout): back off.

        Failures while the engine is already ejected do not lengthen the ejection: they
        are requests that were in flight on it when it failed (ten streams cut by one
        crash are one failure, not ten), not new evidence.
        """
        if now_s < self.ejected_until_s:
            return
        self.consecutive_failures += 1
        backoff_s = EJECT_BASE_S * 2 ** min(self.consecutive_failures - 1, 16)
        self.ejected_until_s = now_s + min(backoff_s, EJECT_MAX_S)

    def record_overload(self, now_s: float, for_s: float) -> None:
        """The engine answered that it has no room (503/429): leave it out for ``for_s``.

        Not a failure: the engine works, and its next request should not wait longer
        for having been busy, so the failure count is left alone.
        """
        self.ejected_until_s = max(self.ejected_until_s, now_s + for_s)

    def record_progress(self, tokens_total: float | None, now_s: float) -> None:
        """A scrape's processed-token counters; a change means the engine is working."""
        if tokens_total is None:
            return
        self.counted_s = now_s
        if tokens_total != self.tokens_total:
            self.tokens_total = tokens_total
            self.progress_s = now_s

    def stall_deadline(self, since_s: float, quiet_s: float, blind_s: float) -> float:
        """When a request sent at ``since_s`` that shows no bytes until it is whole (a
        non-streaming answer) has waited long enough on this engine.

        A stall needs evidence: a scrape that read the token counters ``quiet_s`` or more
        after they last moved (or after the request was sent), and found them unchanged.
        A failed scrape is no evidence either way (under load an engine's ``/metrics`` can
        take longer than the scrape timeout), so without such a scrape the wait goes on
        until ``blind_s`` after the last progress (or after the request was sent).

        >>> e = Endpoint(url="u", role="decode")
        >>> e.record_progress(100.0, now_s=1.0)
        >>> e.record_progress(100.0, now_s=4.0)   # unchanged 3 s after the request
        >>> e.stall_deadline(since_s=1.0, quiet_s=2.0, blind_s=60.0)
        3.0
        >>> e = Endpoint(url="u", role="decode")
        >>> e.record_progress(100.0, now_s=1.0)   # then its scrapes time out
        >>> e.stall_deadline(since_s=1.0, quiet_s=2.0, blind_s=60.0)
        61.0
        """
        quiet_from = max(self.progress_s, since_s)
        if self.counted_s >= quiet_from + quiet_s:
            return quiet_from + quiet_s
        return quiet_from + max(quiet_s, blind_s)

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.ejected_until_s = 0.0

    def record_scrape(
        self, waiting: float | None, running: float | None, kv_usage: float | None
    ) -> None:
        self.scraped_waiting, self.scraped_running = waiting, running
        self.scraped_kv_usage = kv_usage
        self.requests_at_scrape = self.outstanding_requests
        self.scrape_ok = True

    def foreign(self, scraped: float | None) -> float:
        """Requests in a scraped count that other routers sent (never negative)."""
        return max(0.0, (scraped or 0.0) - self.requests_at_scrape)

    @property
    def streaming(self) -> bool:
        """Decode engines: whether it has sequences whose tokens an absorbed prefill would
        hold up (this router's outstanding requests, or running ones at the last scrape)."""
        return self.outstanding_requests > 0 or bool(self.scraped_running)

    def record_gap(self, gap_s: float) -> None:
        """A token gap of a stream from this engine."""
        if self.recent_gap_s is None:
            self.recent_gap_s = gap_s
        else:
            self.recent_gap_s += GAP_EWMA_WEIGHT * (gap_s - self.recent_gap_s)


def compute_prefill_score(endpoint: Endpoint, mean_prompt_tokens: float) -> float:
    """Outstanding prompt tokens: this router's exact count plus other routers' queue.

    The scraped queue minus what was this router's own at scrape time is other routers'
    work, each request counted at the mean prompt size seen. Worked example: 3000 own
    tokens now; at the last scrape the engine had 5 waiting of which 2 were ours; mean
    prompt 1000 tokens: 3000 + (5 - 2) * 1000 = 6000. Only the foreign part comes from
    the (stale) scrape, so one router alone balances on exact counts.
    """
    foreign = endpoint.foreign(endpoint.scraped_waiting)
    return endpoint.outstanding_prompt_tokens + foreign * mean_prompt_tokens


def compute_prefill_wait_s(
    endpoint: Endpoint, mean_prompt_tokens: float, tokens_per_s: float
) -> float:
    """Expected wait before a new prompt starts prefilling: queued prompt tokens
    (:func:`compute_prefill_score`) over the rate one replica prefills.

    >>> e = Endpoint("http://a", "prefill", outstanding_prompt_tokens=30_000)
    >>> compute_prefill_wait_s(e, 1_000, 25_000)
    1.2
    """
    return compute_prefill_score(endpoint, mean_prompt_tokens) / max(tokens_per_s, 1e-9)


def compute_decode_score(endpoint: Endpoint) -> float:
    """KV-cache usage (weighted) plus sequences: this router's, and other routers'.

    Example: 40 % KV in use; 12 own requests now; the last scrape saw 20 running + 2
    waiting while 10 were ours: 0.4 * 100 + 12 + (22 - 10) = 64.
    """
    scraped = (endpoint.scraped_running or 0.0) + (endpoint.scraped_waiting or 0.0)
    sequences = endpoint.outstanding_requests + endpoint.foreign(scraped)
    return (endpoint.scraped_kv_usage or 0.0) * KV_USAGE_WEIGHT + sequences


def compute_pool_score(endpoint: Endpoint, mean_prompt_tokens: float) -> float:
    """Aggregated engines do both phases: decode load plus queued prefill in sequences."""
    queued = compute_prefill_score(endpoint, mean_prompt_tokens) / max(mean_prompt_tokens, 1.0)
    return compute_decode_score(endpoint) + queued


def candidates(
    endpoints: Sequence[Endpoint], now_s: float, exclude: frozenset[str] = frozenset()
) -> list[Endpoint]:
    """Healthy endpoints not in ``exclude``; all non-excluded ones if none is healthy.

    Falling back to unhealthy engines beats failing outright: ejection is a guess from
    recent failures, and an engine that recovered is found again this way.
    """
    allowed = [e for e in endpoints if e.url not in exclude]
    healthy = [e for e in allowed if e.healthy(now_s)]
    return healthy or allowed


def pick_two_choices(
    pool: Sequence[Endpoint], scores: dict[str, float], rng: random.Random
) -> Endpoint | None:
    """Power of two choices: the lower-scored of two distinct random endpoints."""
    if not pool:
        return None
    if len(pool) == 1:
        return pool[0]
    first, second = rng.sample(range(len(pool)), 2)
    a, b = pool[first], pool[second]
    return a if scores[a.url] <= scores[b.url] else b


def compute_affinity_order(key: bytes, pool: Sequence[Endpoint]) -> list[Endpoint]:
    """Endpoints by rendezvous-hash weight for ``key``, heaviest first.

    Rendezvous (highest-random-weight) hashing is consistent hashing without a ring:
    adding or removing an engine moves only the keys that hashed to that engine.
    """

    def weight(endpoint: Endpoint) -> bytes:
        return hashlib.blake2b(key + endpoint.url.encode(), digest_size=8).digest()

    return sorted(pool, key=weight, reverse=True)


def pick_scored(
    pool: Sequence[Endpoint],
    scores: dict[str, float],
    rng: random.Random,
    affinity_key: bytes | None,
    slack: float,
) -> Endpoint | None:
    """The affine endpoint for ``affinity_key`` unless overloaded, else two choices.

    Bounded-load hashing: the first two endpoints in rendezvous order are tried, and one
    is kept if its score is at most ``AFFINITY_LOAD_FACTOR`` times the mean plus
    ``slack``; a hot prefix thus spills to a second engine instead of piling on one.
    """
    if affinity_key is not None and len(pool) > 1:
        bound = AFFINITY_LOAD_FACTOR * sum(scores.values()) / len(pool) + slack
        for endpoint in compute_affinity_order(affinity_key, pool)[:2]:
            if scores[endpoint.url] <= bound:
                return endpoint
    return pick_two_choices(pool, scores, rng)


def pick_least(
    pool: Sequence[Endpoint], scores: dict[str, float], rng: random.Random
) -> Endpoint | None:
    """The lowest-scored endpoint, ties broken at random."""
    if not pool:
        return None
    best = min(scores[e.url] for e in pool)
    tied = [e for e in pool if scores[e.url] <= best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


def pick_prefill(
    endpoints: Sequence[Endpoint],
    *,
    now_s: float,
    rng: random.Random,
    mean_prompt_tokens: float,
    affinity_key: bytes | None = None,
    exclude: frozenset[str] = frozenset(),
) -> Endpoint | None:
    """The prefill engine for a prompt: its affine engine if not overloaded, else the
    one it would wait least behind (the least queued prompt tokens; every replica of a
    pool prefills at the same rate)."""
    pool = candidates(endpoints, now_s, exclude)
    scores = {e.url: compute_prefill_score(e, mean_prompt_tokens) for e in pool}
    if affinity_key is not None and len(pool) > 1:
        return pick_scored(pool, scores, rng, affinity_key, AFFINITY_SLACK_TOKENS)
    return pick_least(pool, scores, rng)


def pick_absorber(
    prefill: Sequence[Endpoint],
    decode: Sequence[Endpoint],
    *,
    prompt_tokens: int,
    now_s: float,
    mean_prompt_tokens: float,
    tokens_per_s: float | None,
    ttft_target_s: float | None,
    itl_target_s: float | None,
) -> Endpoint | None:
    """A decode engine to prefill this prompt itself, or ``None`` to use the prefill pool.

    Only when the prefill pool's least expected wait plus the prompt's own prefill would
    pass its TTFT target, and a healthy decode engine has no queue, runs at most
    :data:`ABSORB_GAP_SHARE` of the ITL target, is free to absorb (:data:`ABSORB_DUTY`)
    and would give the first token sooner (its own absorbed prompts ahead of this one),
    for a prompt whose prefill stalls its streams at most :data:`ABSORB_MAX_STALL_ITL`
    ITL targets. Of those, the least loaded. An engine without streams has none to
    stall: only its own absorbed prompts ahead of this one count.

    Worked example: prefill engines 30k and 45k tokens behind at 25k tok/s, a 2,000-token
    prompt, target 1 s: 1.2 + 0.08 s > 1 s. A decode engine at 15 ms a token under a
    50 ms target (p90), nothing absorbed: stall 0.08 s <= 0.1 s, first token in about
    0.08 s: absorbed; it absorbs again 0.08 + 19 x 0.015 = 0.365 s later at the earliest.
    """
    via_prefill_s = compute_prefill_overrun_s(
        prefill,
        prompt_tokens=prompt_tokens,
        now_s=now_s,
        mean_prompt_tokens=mean_prompt_tokens,
        tokens_per_s=tokens_per_s,
        ttft_target_s=ttft_target_s,
        itl_target_s=itl_target_s,
    )
    if via_prefill_s is None or not tokens_per_s or not itl_target_s:
        return None
    fit = [
        e
        for e in decode
        if e.healthy(now_s)
        and now_s >= e.absorb_free_at_s
        and not e.scraped_waiting
        and (
            not e.streaming
            or e.recent_gap_s is None
            or e.recent_gap_s <= ABSORB_GAP_SHARE * itl_target_s
        )
        and (e.absorbed_prompt_tokens + prompt_tokens) / tokens_per_s < via_prefill_s
    ]
    if not fit:
        return None
    return min(fit, key=compute_decode_score)


def compute_prefill_overrun_s(
    prefill: Sequence[Endpoint],
    *,
    prompt_tokens: int,
    now_s: float,
    mean_prompt_tokens: float,
    tokens_per_s: float | None,
    ttft_target_s: float | None,
    itl_target_s: float | None,
) -> float | None:
    """The expected first token through the prefill pool (its least expected wait plus the
    prompt's own prefill), when it passes the TTFT target and the prompt is short enough
    for a decode engine to absorb (``None`` otherwise: no decode engine need be looked at).
    """
    if not tokens_per_s or not ttft_target_s or not itl_target_s:
        return None
    stall_s = prompt_tokens / tokens_per_s
    if stall_s > ABSORB_MAX_STALL_ITL * itl_target_s:
        return None
    pool = [e for e in prefill if e.healthy(now_s)]
    if not pool:
        return None
    wait_s = min(compute_prefill_wait_s(e, mean_prompt_tokens, tokens_per_s) for e in pool)
    return wait_s + stall_s if wait_s + stall_s > ttft_target_s else None


def compute_absorb_free_at_s(
    endpoint: Endpoint, now_s: float, prompt_tokens: int, tokens_per_s: float, itl_percentile: int
) -> float:
    """When a decode engine that absorbs this prompt now may absorb the next: after the
    prompt's prefill and as many of its streams' steps as keep absorbed prefills to
    :data:`ABSORB_SLOW_GAP_SHARE` of the gaps the ITL percentile lets be slow. At once
    when it has no streams to stall.

    >>> e = Endpoint("http://d", "decode", outstanding_requests=30, recent_gap_s=0.015)
    >>> round(compute_absorb_free_at_s(e, 10.0, 2_000, 25_000.0, 90), 3)
    10.365
    """
    if not endpoint.streaming or endpoint.recent_gap_s is None:
        return now_s
    slow = (1.0 - itl_percentile / 100.0) * ABSORB_SLOW_GAP_SHARE
    steps = max(math.ceil(1.0 / slow - 1e-9) - 1, 0) if slow > 0 else 0
    return now_s + prompt_tokens / tokens_per_s + steps * endpoint.recent_gap_s


def pick_decode(
    endpoints: Sequence[Endpoint],
    *,
    now_s: float,
    rng: random.Random,
    exclude: frozenset[str] = frozenset(),
) -> Endpoint | None:
    """The decode engine: P2C on KV usage and outstanding sequences."""
    pool = candidates(endpoints, now_s, exclude)
    return pick_two_choices(pool, {e.url: compute_decode_score(e) for e in pool}, rng)


def pick_pool(
    endpoints: Sequence[Endpoint],
    *,
    now_s: float,
    rng: random.Random,
    mean_prompt_tokens: float,
    affinity_key: bytes | None = None,
    exclude: frozenset[str] = frozenset(),
) -> Endpoint | None:
    """An aggregated engine: affinity (its prefix cache) if not overloaded, else P2C."""
    pool = candidates(endpoints, now_s, exclude)
    scores = {e.url: compute_pool_score(e, mean_prompt_tokens) for e in pool}
    return pick_scored(pool, scores, rng, affinity_key, AFFINITY_SLACK_SEQUENCES)
