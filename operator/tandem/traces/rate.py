"""Turning a trace into the arrivals of one run: rate scaling, deterministic for a seed. Pure.

``--rate-scale X`` multiplies the request rate while keeping the trace's duration and
its shape over time. Each request is kept ``floor(X)`` times, plus once more with
probability ``X - floor(X)``; the original keeps its time and every extra copy lands
at a uniformly random point between the request and the next one. The local rate at
any time scale longer than one inter-arrival gap is thus multiplied by ``X`` (a burst
stays a burst, a lull stays a lull), and copies carry their original's token counts
(and its session and shared prefix), so the mix of lengths is the trace's own.
``X < 1`` thins the trace the same way.

Worked example, ``X = 2.5``: every request appears twice (itself and one copy placed
between it and its successor), and half of them a third time.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import replace

from tandem.traces.parse import TraceRequest


def scale_rate(
    requests: Sequence[TraceRequest], rate_scale: float, seed: int = 0
) -> list[TraceRequest]:
    """The arrivals of a trace at ``rate_scale`` times its rate, sorted by time."""
    if not math.isfinite(rate_scale) or rate_scale <= 0:
        raise ValueError(f"rate scale must be a finite number > 0, got {rate_scale}")
    if rate_scale == 1.0:
        return list(requests)
    rng = random.Random(seed)
    whole = int(rate_scale)
    extra = rate_scale - whole
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(requests)]
    mean_gap = sum(gaps) / len(gaps) if gaps else 1.0
    out: list[TraceRequest] = []
    for i, req in enumerate(requests):
        copies = whole + (1 if rng.random() < extra else 0)
        gap = gaps[i] if i < len(gaps) else mean_gap
        for c in range(copies):
            t = req.arrival_s if c == 0 else req.arrival_s + rng.random() * gap
            out.append(req if c == 0 else replace(req, arrival_s=t))
    out.sort(key=lambda r: r.arrival_s)
    return out


def with_warmup(
    requests: Sequence[TraceRequest], warmup_s: float
) -> tuple[list[TraceRequest], int, float]:
    """``(arrivals, first_measured, offset_s)``: a warm-up, then the trace.

    The warm-up is the trace's first ``warmup_s`` mirrored in time (the load at ``-t``
    is the load at ``+t``), so it flows into the trace without a jump and every policy
    reaches the measured part in the state its own decisions led to. Everything is
    shifted by ``offset_s`` (the warm-up length) so time starts at 0; the first
    ``first_measured`` arrivals are the warm-up's, excluded from the figures.
    """
    if warmup_s <= 0 or not requests:
        return list(requests), 0, 0.0
    head = [r for r in requests if r.arrival_s < warmup_s]
    warm = sorted(
        (replace(r, arrival_s=warmup_s - r.arrival_s) for r in head), key=lambda r: r.arrival_s
    )
    measured = [replace(r, arrival_s=r.arrival_s + warmup_s) for r in requests]
    return warm + measured, len(warm), warmup_s
