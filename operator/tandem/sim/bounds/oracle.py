"""The oracle: the fewest GPU-hours a schedule meeting the targets could spend. Pure.

With perfect knowledge of the trace, for every window of ``window_s`` (10 s: the time
scale of a TTFT target, short enough to see the bursts a schedule meeting it must
serve; 60 s averages hide them: on the Azure code trace the peak 10 s prompt rate is
3.2 times the peak minute's) and every pool:

1. **Work.** Prefill: every prompt arriving in the window (its first token is due
   within the TTFT target, far shorter than the window). Decode: every output token,
   each request's tokens spread evenly from its arrival over ``output x ITL target``
   (the pace of a request served exactly at its ITL target).
2. **Least busy time for that work** on one replica, from the engine model's cost
   model (:mod:`tandem.sim.bounds.capacity`): prefill packed into full token budgets (the
   most efficient batches there are, whatever the latency); decode at the largest
   batch whose iteration meets the ITL target at the window's mean context (per-token
   cost only falls with batch size, so no batch meeting the target does better).
3. **Replicas** ``n_w = max(min, ceil(busy / (window_s + TTFT target)))``: fewer
   replicas cannot do that much work in the window, even granting the last arrivals
   their whole TTFT budget past its end. Aggregated pools take the larger need. The
   horizon is the last arrival (every schedule runs at least that long); the last
   window ends there, and decode work placed after it is left out.
4. **Schedule with cold start.** Replicas are interchangeable, so the cheapest schedule
   treats each level ``k`` (the k-th replica) on its own: it is paid over the windows
   with ``n_w >= k``, plus one cold start before each time it must come up again,
   except that a gap shorter than a cold start is cheaper to bridge (paid through).
   Replicas present at time 0 are free of a cold start (every run starts warm), and a
   replica is released the instant it is no longer needed (no drain, no
   stabilization window).

Why it is a lower bound: every step favours the oracle. Its capacity is the cost
model's best case (perfect packing, no queueing, no KV transfer, no interference), it
is paid for nothing but the work it must do and the cold starts it cannot avoid, and
its demand is averaged over the window, which can only hide peaks a real schedule
must also serve. What remains approximate: decode
tokens are placed at the ITL-target pace (a request served faster moves some of its
tokens into an earlier window), and the ITL target is read as "every step within the
target", where a p90 target tolerates slower steps for a tenth of the tokens.
``tests/sim`` checks the bound against every simulated policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tandem.api.vocab import PoolRole
from tandem.sim.bounds.capacity import decode_batch_at_itl, decode_token_s, prefill_busy_s
from tandem.sim.fleet.spec import FleetPlan, PoolPlan
from tandem.traces.parse import TraceRequest

DEFAULT_WINDOW_S = 10.0


@dataclass(frozen=True)
class WindowDemand:
    """The trace's work in one window."""

    length_s: float
    """The window's length (the last one ends at the last arrival)."""
    prompt_tokens: int = 0
    attn_pairs: float = 0.0
    """Sum of ``p (p + 1) / 2`` over the prompts (attention pairs of their prefill)."""
    prompts: int = 0
    output_tokens: float = 0.0
    """Output tokens placed in this window (fractional: spread over windows)."""
    context_token_sum: float = 0.0
    """Sum over those tokens of the context each is generated at."""


@dataclass(frozen=True)
class PoolOracle:
    role: PoolRole
    replicas: tuple[int, ...]
    """Least replicas per window."""
    gpu_hours: float
    need: tuple[float, ...] = ()
    """Replicas' worth of busy time per window before rounding up (``busy / length``)."""

    @property
    def peak(self) -> int:
        return max(self.replicas, default=0)


@dataclass(frozen=True)
class Oracle:
    window_s: float
    cold_start_s: float
    pools: Mapping[PoolRole, PoolOracle]

    @property
    def gpu_hours(self) -> float:
        return sum(p.gpu_hours for p in self.pools.values())

    @property
    def peak_replicas(self) -> dict[str, int]:
        return {role: p.peak for role, p in self.pools.items()}


def compute_demand(
    requests: Sequence[TraceRequest], window_s: float, itl_s: float
) -> list[WindowDemand]:
    """Per-window work of a trace (see the module docstring, step 1).

    The horizon is the last arrival: every schedule runs at least that long, and work
    placed after it is left out (a schedule may do it later), so each window's work
    stays a lower bound.
    """
    horizon = max((r.arrival_s for r in requests), default=0.0)
    count = max(int(-(-horizon // window_s)), 1)
    prompt = [0] * count
    pairs = [0.0] * count
    prompts = [0] * count
    out = [0.0] * count
    ctx = [0.0] * count
    for r in requests:
        w = min(int(r.arrival_s // window_s), count - 1)
        p = r.prompt_tokens
        prompt[w] += p
        pairs[w] += p * (p + 1) / 2.0
        prompts[w] += 1
        start, span = r.arrival_s, r.output_tokens * itl_s
        mean_ctx = p + r.output_tokens / 2.0
        end = min(start + span, horizon)
        while start < end:
            cut = min((int(start // window_s) + 1) * window_s, end)
            share = r.output_tokens * (cut - start) / span
            k = min(int(start // window_s), count - 1)
            out[k] += share
            ctx[k] += share * mean_ctx
            start = cut
    lengths = [min(window_s, max(horizon - k * window_s, 0.0)) for k in range(count)]
    columns = zip(lengths, prompt, pairs, prompts, out, ctx, strict=True)
    return [WindowDemand(*v) for v in columns]


def compute_pool_need(
    pool: PoolPlan, demand: Sequence[WindowDemand], itl_s: float, slack_s: float = 0.0
) -> tuple[float, ...]:
    """Busy replicas ``pool`` needs per window (step 2, over step 3's time): the window's
    work may run ``slack_s`` (the TTFT target) past its end, as a request arriving at
    the window's end may still meet its target."""
    cfg, cost = pool.engine_config, pool.cost
    out: list[float] = []
    for d in demand:
        busy_p = busy_d = 0.0
        if pool.role in ("prefill", "pool"):
            busy_p = prefill_busy_s(cost, cfg, d.prompt_tokens, d.attn_pairs, d.prompts)
        if pool.role in ("decode", "pool") and d.output_tokens > 0:
            context = d.context_token_sum / d.output_tokens
            batch = decode_batch_at_itl(cost, cfg, itl_s, context)
            busy_d = d.output_tokens * decode_token_s(cost, batch, context)
        busy = max(busy_p, busy_d)
        out.append(busy / (d.length_s + slack_s) if busy > 0 else 0.0)
    return tuple(out)


def compute_pool_replicas(pool: PoolPlan, need: Sequence[float]) -> tuple[int, ...]:
    """Whole replicas within the pool's bounds for each window's need (step 3)."""
    top = max(pool.max_replicas, pool.min_replicas)
    return tuple(min(max(math.ceil(n - 1e-9), pool.min_replicas), top) for n in need)


def compute_schedule_s(
    replicas: Sequence[int], lengths_s: Sequence[float], cold_start_s: float
) -> float:
    """Replica-seconds of the cheapest schedule providing ``replicas`` per window of
    ``lengths_s`` (step 4).

    Level 1 below is on throughout (240 s); level 2 comes up at window 1 (a cold start,
    120 s, then 60 s) and again at window 3, after a 60 s gap cheaper to bridge than a
    second cold start (60 s + 60 s):

    >>> compute_schedule_s([1, 2, 1, 2], [60.0] * 4, 120.0)
    540.0
    """
    starts_s = [0.0]
    for length in lengths_s:
        starts_s.append(starts_s[-1] + length)
    total = 0.0
    for level in range(1, max(replicas, default=0) + 1):
        on = [n >= level for n in replicas]
        previous_end_s: float | None = None
        for w, needed in enumerate(on):
            if not needed:
                continue
            total += lengths_s[w]
            if w > 0 and not on[w - 1]:
                if previous_end_s is None:
                    total += cold_start_s
                else:
                    total += min(starts_s[w] - previous_end_s, cold_start_s)
            if w + 1 == len(on) or not on[w + 1]:
                previous_end_s = starts_s[w + 1]
    return total


def compute_oracle(
    plan: FleetPlan, requests: Sequence[TraceRequest], window_s: float = DEFAULT_WINDOW_S
) -> Oracle:
    """The oracle of ``plan`` serving ``requests`` (every pool of the plan)."""
    itl_s = plan.targets.itl_s or 0.05
    slack_s = plan.targets.ttft_s or 0.0
    demand = compute_demand(requests, window_s, itl_s)
    pools: dict[PoolRole, PoolOracle] = {}
    lengths = [d.length_s for d in demand]
    for role, pool in plan.pools.items():
        need = compute_pool_need(pool, demand, itl_s, slack_s)
        replicas = compute_pool_replicas(pool, need)
        replica_s = compute_schedule_s(replicas, lengths, plan.cold_start_s)
        gpu_hours = replica_s * pool.gpus_per_replica / 3600.0
        pools[role] = PoolOracle(role, replicas, gpu_hours, need)
    return Oracle(window_s, plan.cold_start_s, pools)
