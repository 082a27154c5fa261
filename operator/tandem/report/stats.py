"""Percentiles and the SLO test of one request, as every report of Tandem computes them.
Pure.

* Percentiles are nearest-rank: the smallest value with at least ``q`` of the values at
  or below it (no interpolation, so a reported p90 is a latency some request really had).
* A request **meets the SLO** when its TTFT is within the TTFT target and its ITL (the
  mean gap between its tokens after the first, i.e. TPOT) within the ITL target; a
  one-token answer has no ITL, and a target that is not declared is always met.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tandem.policy.config import LatencyTargets


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank ``q`` quantile (0-1) of ascending values; NaN when empty.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.9)
    4.0
    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5)
    2.0
    """
    if not sorted_values:
        return math.nan
    rank = max(math.ceil(q * len(sorted_values)) - 1, 0)
    return sorted_values[min(rank, len(sorted_values) - 1)]


def weighted_percentiles(
    values: Sequence[float], weights: Sequence[int], qs: Sequence[float]
) -> list[float]:
    """Nearest-rank quantiles ``qs`` (ascending, 0-1) of ``values`` each counted
    ``weights`` times; NaN when there is nothing.

    >>> weighted_percentiles([0.02, 0.5], [9, 1], [0.5, 0.9, 0.99])
    [0.02, 0.02, 0.5]
    """
    total = sum(weights)
    if total == 0:
        return [math.nan] * len(qs)
    out: list[float] = []
    pending = list(qs)
    running = 0
    for value, weight in sorted(zip(values, weights, strict=True)):
        running += weight
        while pending and running >= pending[0] * total:
            out.append(value)
            pending.pop(0)
        if not pending:
            break
    return out + [max(values)] * len(pending)


def meets_targets(
    ttft_s: float, tpot_s: float, targets: LatencyTargets, prompt_tokens: float = 0
) -> bool:
    """Whether a completed request of ``prompt_tokens`` with this TTFT and mean token gap
    (NaN: one token, no gap) met both targets (the TTFT target grows with the prompt when
    it has a per-prompt-token allowance).

    >>> t = LatencyTargets(ttft_s=1.0, ttft_percentile=90, itl_s=0.05, itl_percentile=90)
    >>> meets_targets(0.8, 0.04, t), meets_targets(0.8, 0.06, t), meets_targets(1.2, 0.01, t)
    (True, False, False)
    >>> meets_targets(0.8, float("nan"), t)
    True
    >>> long = LatencyTargets(1.0, 90, 0.05, 90, ttft_per_prompt_token_s=5e-05)
    >>> meets_targets(1.2, 0.01, long, prompt_tokens=10_000)
    True
    """
    ttft_target_s = targets.ttft_for(prompt_tokens)
    ok_ttft = ttft_target_s is None or ttft_s <= ttft_target_s
    ok_itl = targets.itl_s is None or math.isnan(tpot_s) or tpot_s <= targets.itl_s
    return ok_ttft and ok_itl
