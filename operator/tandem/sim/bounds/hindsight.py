"""The best fixed fleet in hindsight: the cheapest static pool sizes that reach an
attainment on a whole trace, found by search. Pure: the replays are the caller's.

An autoscaler has to beat this to be worth running: with the whole trace known, an
operator could have provisioned it and never touched it again. :func:`search_fixed_fleet`
finds it with few replays by leaning on one property: **attainment rises with each
pool's size** (more replicas never make a static fleet slower, up to noise). Then:

* one pool (aggregated): the smallest size meeting the goal is a bisection;
* two pools (prefill ``a``, decode ``b``): the sizes meeting the goal form an up-set
  whose lower edge is a staircase ``b(a)``, the least decode size for ``a`` prefill
  replicas, non-increasing in ``a``. The search finds ``a_min`` (the least prefill size
  meeting the goal with the largest decode pool) and ``b_min`` (the least decode size
  with the largest prefill pool) by bisection, then walks the staircase from ``a_min``
  upward, lowering ``b`` step by step, and stops as soon as ``a`` alone prices every
  further pair out: ``g_a x a + g_b x b_min >= `` the best cost so far (``g`` is GPUs per
  replica). Each step of the walk costs one replay where ``b`` does not move and a short
  search down from the last ``b`` where it does.

Bisections start from a guess (the caller's estimate, e.g. the peak oracle need) and
gallop from it, so a good guess saves replays. Every pair the search reports was
replayed and did reach the goal; under the monotone assumption it is the cheapest one
(GPUs, ties to the higher attainment). Where attainment is not monotone (a few tenths
of a point of replay noise), a cheaper pair may exist off the walk: the search is an
upper bound of the best fixed fleet, and ``tried`` lists every replay. Replays are
memoized and capped by ``max_replays``; ``exhausted`` says when the cap stopped it.

Worked example (GPUs per replica 1): with ``b(a) = 6, 3, 3, 2`` for ``a = 3..6``
(``a_min = 3``, ``b_min = 2``), the walk finds ``(3, 6)`` (cost 9), then ``(4, 3)``
(cost 7), and stops at ``a = 5``: ``5 + b_min = 7`` cannot beat 7. The answer is
``(4, 3)``; ``(6, 2)`` (cost 8) is never replayed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from tandem.sim.bounds.foresight import Outcome

R = TypeVar("R", bound=Outcome)

#: Replays one search may make (the walk stops there and says so).
DEFAULT_MAX_REPLAYS = 40


@dataclass(frozen=True)
class FixedFleetSearch(Generic[R]):
    """What :func:`search_fixed_fleet` found."""

    sizes: Mapping[str, int]
    """Role → replicas of the cheapest fleet found meeting the goal (or of the largest
    fleet, which did not, when ``met`` is false)."""
    result: R
    """Its replay."""
    goal: float
    met: bool
    exhausted: bool
    """Whether ``max_replays`` stopped the search before it finished."""
    tried: tuple[tuple[Mapping[str, int], R], ...]
    """Every replay, in order."""


class _Budget(Exception):
    """The replay cap was reached."""


def search_fixed_fleet(
    run: Callable[[Mapping[str, int]], R],
    bounds: Mapping[str, tuple[int, int]],
    goal: float,
    *,
    gpus: Mapping[str, int] | None = None,
    guess: Mapping[str, int] | None = None,
    max_replays: int = DEFAULT_MAX_REPLAYS,
) -> FixedFleetSearch[R]:
    """The cheapest sizes (one or two pools, each within its ``(min, max)`` bounds) whose
    replay ``run(sizes)`` reaches ``goal`` attainment; see the module docstring."""
    roles = tuple(bounds)
    if len(roles) not in (1, 2):
        raise ValueError(f"a fixed fleet has one or two pools, got {', '.join(roles) or 'none'}")
    if max_replays < 1:
        raise ValueError(f"max_replays must be >= 1, got {max_replays}")
    for role, (lo, hi) in bounds.items():
        if not 0 < lo <= hi:
            raise ValueError(f"{role}: bounds must satisfy 0 < min <= max, got ({lo}, {hi})")
    weight = {r: (gpus or {}).get(r, 1) for r in roles}
    start = {r: (guess or {}).get(r, bounds[r][1]) for r in roles}
    memo: dict[tuple[int, ...], R] = {}
    tried: list[tuple[Mapping[str, int], R]] = []

    def replay(key: tuple[int, ...]) -> R:
        if key not in memo:
            if len(memo) >= max_replays:
                raise _Budget
            sizes = dict(zip(roles, key, strict=True))
            memo[key] = run(sizes)
            tried.append((sizes, memo[key]))
        return memo[key]

    def ok(key: tuple[int, ...]) -> bool:
        return replay(key).attainment >= goal - 1e-12

    def cost(key: tuple[int, ...]) -> int:
        return sum(weight[r] * n for r, n in zip(roles, key, strict=True))

    def rank(key: tuple[int, ...]) -> tuple[int, float]:
        return cost(key), -memo[key].attainment

    top = tuple(bounds[r][1] for r in roles)
    best: tuple[int, ...] | None = None
    exhausted = False
    try:
        if ok(top):
            best = _cheapest(ok, cost, rank, roles, bounds, start)
    except _Budget:
        exhausted = True
        feasible = [k for k, r in memo.items() if r.attainment >= goal - 1e-12]
        best = min(feasible, key=rank, default=None)
    chosen = best if best is not None else top
    if chosen not in memo:  # only when the cap hit before the first replay
        chosen = next(iter(memo))
    return FixedFleetSearch(
        sizes=dict(zip(roles, chosen, strict=True)),
        result=memo[chosen],
        goal=goal,
        met=best is not None,
        exhausted=exhausted,
        tried=tuple(tried),
    )


def _cheapest(
    ok: Callable[[tuple[int, ...]], bool],
    cost: Callable[[tuple[int, ...]], int],
    rank: Callable[[tuple[int, ...]], tuple[int, float]],
    roles: tuple[str, ...],
    bounds: Mapping[str, tuple[int, int]],
    start: Mapping[str, int],
) -> tuple[int, ...]:
    """The walk of the module docstring, given that the largest sizes meet the goal."""
    if len(roles) == 1:
        (role,) = roles
        lo, hi = bounds[role]
        return (least(lambda n: ok((n,)), lo, hi, start[role]),)
    ra, rb = roles
    (a_lo, a_hi), (b_lo, b_hi) = bounds[ra], bounds[rb]
    a_min = least(lambda a: ok((a, b_hi)), a_lo, a_hi, start[ra])
    b_min = least(lambda b: ok((a_hi, b)), b_lo, b_hi, start[rb])
    best: tuple[int, ...] | None = None
    b_prev = b_hi
    for a in range(a_min, a_hi + 1):
        if best is not None and cost((a, b_min)) >= cost(best):
            break

        def ok_b(x: int, a: int = a) -> bool:
            return ok((a, x))

        if a == a_min:  # the first step may fall far from b_hi: gallop up from the guess
            b = least(ok_b, b_min, b_hi, start[rb])
        elif b_prev > b_min and ok((a, b_prev - 1)):
            b = least_below(ok_b, b_min, b_prev - 1)
        else:
            b = b_prev
        # (a, b_prev) costs more than (a - 1, b_prev): only a lower b makes a candidate.
        moved = a == a_min or b < b_prev
        if moved and (best is None or rank((a, b)) < rank(best)):
            best = (a, b)
        b_prev = b
        if b == b_min:
            break
    assert best is not None
    return best


def least(ok: Callable[[int], bool], lo: int, hi: int, guess: int) -> int:
    """The least ``n`` in ``[lo, hi]`` with ``ok(n)``, given ``ok(hi)`` and ``ok``
    monotone; galloping from ``guess``, then bisecting. Every answer but ``hi`` was
    tested.

    >>> least(lambda n: n >= 5, 1, 32, 4)
    5
    """
    g = min(max(guess, lo), hi)
    while g < hi:
        if ok(g):
            hi = g
            break
        lo = g + 1
        g = min(max(2 * g, g + 1), hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def least_below(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """:func:`least` for a staircase step: the answer is usually just below ``hi``, so
    gallop down from it (``hi - 1``, ``hi - 3``, ``hi - 7``...), then bisect.

    >>> least_below(lambda n: n >= 5, 1, 6)
    5
    """
    step = 1
    while hi > lo:
        probe = max(hi - step, lo)
        if not ok(probe):
            lo = probe + 1
            break
        hi = probe
        step *= 2
    return least(ok, lo, hi, lo)


def fixed_fleet_guess(peak_need: Mapping[str, float], utilization: float = 1.0) -> dict[str, int]:
    """A starting guess: each pool's peak need at ``utilization`` (at least 1)."""
    return {r: max(math.ceil(n / utilization - 1e-9), 1) for r, n in peak_need.items()}
