"""Choosing an engine and running one leg on it, with accounting. Does HTTP I/O.

:func:`choose` waits (bounded) for a pool that is momentarily empty and applies the
pure selection; :func:`run_prefill` is the whole prefill phase of a request, retried
once on another prefill engine. The decode leg, which streams, is in
:mod:`tandem.router.relay`. A retry goes only to a different engine that is healthy
now (:func:`choose` with ``retry=True``): sending it back to the engine that just
failed, or to one that failed a moment ago, would cost the request a second leg for
nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from tandem.router.config import ClassConfig, RouterConfig
from tandem.router.metrics import ClassMetrics
from tandem.router.protocol import build_prefill_body, parse_prefill_answer
from tandem.router.request import Kind, ParsedRequest
from tandem.router.selection import (
    Endpoint,
    compute_absorb_free_at_s,
    pick_absorber,
    pick_decode,
    pick_pool,
    pick_prefill,
)
from tandem.router.state import Router
from tandem.router.tracing import NO_TRACE, NoTrace, RequestTrace
from tandem.router.upstream import Passthrough, UpstreamFailure, post_json

log = logging.getLogger("tandem.router")

PATHS: dict[Kind, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
}


@dataclass
class Exchange:
    """One client request on its way through the router."""

    router: Router
    config: RouterConfig
    klass: ClassConfig
    class_metrics: ClassMetrics
    parsed: ParsedRequest
    request_id: str
    headers: dict[str, str]
    """Headers sent to engines: content type, the request id, the client's Authorization."""
    arrival_s: float
    dispatched: bool = False
    """The first engine request went out (queue wait observed)."""
    dispatch_s: float | None = None
    """When it went out: TTFT from here on is service, not the router's own wait."""
    counted_prompt_tokens: int | None = None
    """The prompt as the prefill engine counted it (its answer's ``usage``)."""
    absorber: Endpoint | None = None
    """The decode engine that prefills this request itself (a burst absorbed)."""
    prefill_done_s: float | None = None
    attempt: int = 0
    """Prefill runs so far beyond the first (a re-run gets a fresh engine request id)."""
    code: int = 0
    """Status the client got (499: it went away; 502/504: its stream broke)."""
    tried: dict[str, set[str]] = field(default_factory=dict)
    trace: RequestTrace | NoTrace = NO_TRACE
    """The request's spans (:mod:`tandem.router.tracing`); nothing when not tracing."""

    def __post_init__(self) -> None:
        self.trace.set("tandem.request_id", self.request_id)
        self.trace.set("tandem.class", self.klass.name)
        self.trace.set("tandem.prompt_tokens_estimate", self.parsed.prompt_tokens)

    @property
    def priority(self) -> int | None:
        return self.klass.priority if self.config.send_priority else None

    def leg_headers(self) -> dict[str, str]:
        """Headers for the next engine request; a re-run prefill gets a fresh id."""
        if self.attempt == 0:
            return self.headers
        return {**self.headers, "X-Request-Id": f"{self.request_id}-{self.attempt}"}

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens: as the prefill engine counted them, else the estimate."""
        return self.counted_prompt_tokens or self.parsed.prompt_tokens

    def mark_dispatch(self) -> None:
        if not self.dispatched:
            self.dispatched = True
            now = asyncio.get_running_loop().time()
            self.dispatch_s = now
            self.class_metrics.queue_wait.observe(now - self.arrival_s)


def new_request_id(given: str | None) -> str:
    """The client's ``X-Request-Id`` when it is a sane token, else a fresh one."""
    if given and len(given) <= 128 and all(c.isalnum() or c in "-_.:" for c in given):
        return given
    return uuid.uuid4().hex


async def choose(
    ex: Exchange, role: str, *, wait: bool = True, retry: bool = False
) -> Endpoint | None:
    """The engine for ``role``'s next leg, excluding ones this request already tried.

    ``wait``: when the pool is empty, wait for an engine up to the connect timeout. The
    prefill leg does not wait: without prefill engines a request goes decode-only at once.
    ``retry``: only an engine that is healthy now; ``None`` when there is none. (A first
    attempt may go to an ejected engine when every engine is; a retry may not.)
    """
    router, parsed = ex.router, ex.parsed
    if wait and not router.pools[role].endpoints:
        await router.wait_for_endpoints(role, ex.config.timeouts.connect_s)
    tried = frozenset(ex.tried.get(role, ()))
    now_s = asyncio.get_running_loop().time()
    members = router.pools[role].members()
    if retry:
        members = [e for e in members if e.healthy(now_s) and e.url not in tried]
    affinity = parsed.prefix if ex.config.prefix_affinity_tokens > 0 else None
    mean = router.prompt_sizes.mean_tokens
    if role == "prefill":
        chosen = pick_prefill(
            members,
            now_s=now_s,
            rng=router.rng,
            mean_prompt_tokens=mean,
            affinity_key=affinity,
            exclude=tried,
        )
    elif role == "decode" and ex.absorber is not None and ex.absorber.url not in tried:
        chosen = ex.absorber
    elif role == "decode":
        chosen = pick_decode(members, now_s=now_s, rng=router.rng, exclude=tried)
    else:
        chosen = pick_pool(
            members,
            now_s=now_s,
            rng=router.rng,
            mean_prompt_tokens=mean,
            affinity_key=affinity,
            exclude=tried,
        )
    if chosen is not None:
        ex.tried.setdefault(role, set()).add(chosen.url)
    return chosen


def note_failure(ex: Exchange, endpoint: Endpoint, err: UpstreamFailure) -> None:
    """Log a failed leg (the engine and the error: never sent to the client) and back
    the engine off: out for its ``Retry-After`` when overloaded, else an ejection."""
    log.warning("request %s: %s engine %s", ex.request_id, endpoint.role, err.detail)
    now_s = asyncio.get_running_loop().time()
    if err.overloaded:
        endpoint.record_overload(now_s, err.retry_after_s or ex.config.retry_after_s)
    else:
        endpoint.record_failure(now_s)


def absorb(ex: Exchange) -> bool:
    """Whether a decode engine takes the whole request (:func:`pick_absorber`); if so it
    is reserved for the request's decode leg and the absorption counted."""
    router = ex.router
    if not ex.config.absorb_bursts:
        return False
    now_s = asyncio.get_running_loop().time()
    rate = router.least.prefill_tokens_per_s(now_s)
    targets = ex.klass.targets
    prompt = ex.parsed.prompt_tokens
    chosen = pick_absorber(
        router.pools["prefill"].members(),
        router.pools["decode"].members(),
        prompt_tokens=prompt,
        now_s=now_s,
        mean_prompt_tokens=router.prompt_sizes.mean_tokens,
        tokens_per_s=rate,
        ttft_target_s=targets.ttft_for(prompt),
        itl_target_s=targets.itl_s,
    )
    if chosen is None or rate is None:
        return False
    chosen.absorb_free_at_s = compute_absorb_free_at_s(
        chosen, now_s, prompt, rate, targets.itl_percentile
    )
    ex.absorber = chosen
    ex.class_metrics.absorbed.inc()
    ex.class_metrics.absorbed_tokens.inc(prompt)
    return True


@dataclass(frozen=True)
class PrefillResult:
    """The prefill phase's outcome: KV params to hand off, or ``None`` (decode-only)."""

    kv_params: dict[str, Any] | None


async def run_prefill(ex: Exchange) -> PrefillResult | Passthrough:
    """Prefill on one engine, retried once on another; ``kv_params=None`` if both fail.

    The fallback (decode-only: the decode engine prefills locally) keeps a request
    alive through a prefill pool outage at the price of its latency. A prefill engine's
    4xx is the client's error and is returned as a :class:`Passthrough`.
    """
    router, config = ex.router, ex.config
    body = build_prefill_body(ex.parsed.body, ex.priority, ex.parsed.kind)
    url_path = PATHS[ex.parsed.kind]
    for attempt in range(2):
        endpoint = await choose(ex, "prefill", wait=False, retry=attempt > 0)
        if endpoint is None:
            break
        if attempt:
            router.metrics.retries.labels("prefill").inc()
        ex.mark_dispatch()
        endpoint.outstanding_requests += 1
        endpoint.outstanding_prompt_tokens += ex.parsed.prompt_tokens
        leg = ex.trace.leg("prefill", endpoint.url, ex.attempt)
        status: int | None = None
        failure: str | None = "cancelled"
        try:
            answer = await post_json(
                router.engines,
                endpoint.url + url_path,
                body,
                leg.headers(ex.leg_headers()),
                timeout_s=config.timeouts.prefill_s,
                connect_timeout_s=config.timeouts.connect_s,
            )
            status, failure = (answer.status if isinstance(answer, Passthrough) else 200), None
        except UpstreamFailure as err:
            failure = err.reason
            note_failure(ex, endpoint, err)
            continue
        finally:
            endpoint.outstanding_requests -= 1
            endpoint.outstanding_prompt_tokens -= ex.parsed.prompt_tokens
            leg.end(status, failure)
        if isinstance(answer, Passthrough):
            return answer
        endpoint.record_success()
        ex.prefill_done_s = asyncio.get_running_loop().time()
        kv_params, ex.counted_prompt_tokens = parse_prefill_answer(answer)
        if kv_params is not None:
            leg.set("tandem.kv.remote_engine_id", str(kv_params.get("remote_engine_id")))
        if kv_params is None:
            router.metrics.retries.labels("fallback").inc()
        return PrefillResult(kv_params)
    router.metrics.retries.labels("fallback").inc()
    return PrefillResult(None)
