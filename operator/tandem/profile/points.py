"""What one request and one sweep point measured, and their percentiles. Pure.

Times are seen from the client, and from the engine where it exports its latency
histograms. A request's inter-token latency is its mean gap,
``(last token - first token) / (tokens - 1)``, counted with the engine's own token count
(``usage.completion_tokens``): an engine that falls behind its clients sends several
tokens in one chunk (vLLM merges the deltas a slow stream has not read yet), so gaps
between chunks would not be gaps between tokens, while the mean over a request is the
same either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.profile.plan import PointSpec


@dataclass(frozen=True)
class RequestTiming:
    """One request, as its client saw it (seconds from sending it)."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    last_token_s: float

    @property
    def itl_s(self) -> float | None:
        """Mean inter-token latency; ``None`` with fewer than two tokens."""
        if self.output_tokens < 2:
            return None
        return (self.last_token_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    >>> percentile([5.0], 90)
    5.0
    """
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class PointResult:
    """The requests of one sweep point."""

    spec: PointSpec
    requests: tuple[RequestTiming, ...]
    engine_ttfts_s: tuple[float, ...] = ()
    """The engine's own mean TTFT of each wave (``vllm:time_to_first_token_seconds``,
    sum over count read before and after it), when it exports it."""
    engine_itls_s: tuple[float, ...] = ()
    """The engine's own mean inter-token latency of each wave
    (``vllm:inter_token_latency_seconds``): timed where the tokens are made."""

    @property
    def engine_ttft_s(self) -> float | None:
        """The median over waves of the engine's mean TTFT."""
        return percentile(self.engine_ttfts_s, 50) if self.engine_ttfts_s else None

    @property
    def engine_itl_s(self) -> float | None:
        return percentile(self.engine_itls_s, 50) if self.engine_itls_s else None

    @property
    def ttfts_s(self) -> list[float]:
        return [r.ttft_s for r in self.requests]

    @property
    def itls_s(self) -> list[float]:
        return [itl for r in self.requests if (itl := r.itl_s) is not None]

    def ttft_s(self, q: float = 50) -> float:
        return percentile(self.ttfts_s, q)

    def itl_s(self, q: float = 50) -> float:
        return percentile(self.itls_s, q)

    @property
    def observed_s(self) -> float:
        """What the fit matches: the TTFT of a prefill point, the ITL of a decode point;
        the engine's own where it reports them (the median over waves of its means), else
        the clients' median (medians: a busy machine's stalls hit a few requests hard).

        The engine's own times leave out what happens between it and the client: the
        HTTP round trip, and an API server that falls behind and delivers tokens in
        bursts (which the clients' gaps would count as no gap, then a long one)."""
        engine = self.engine_ttft_s if self.spec.kind == "prefill" else self.engine_itl_s
        if engine is not None and engine > 0:
            return engine
        return self.ttft_s() if self.spec.kind == "prefill" else self.itl_s()
