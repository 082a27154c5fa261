"""What a trace holds, in a few numbers: rate, burstiness, lengths, long-context share,
multi-turn reuse. Pure: requests in, a :class:`TraceSummary` out.

Used by ``tandem trace generate`` to say what it wrote and by ``bench/autoscale.py`` to
describe every trace it replays (so a figure can be read against the traffic behind it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.traces.parse import TraceRequest, trace_span_s

#: Prompts at least this long count as long-context in a summary (16k tokens: an H100
#: prefills Llama-3.1-8B at roughly 20-30k tokens/s, so such a prompt alone takes most of
#: a 1 s TTFT budget).
LONG_PROMPT_TOKENS = 16_384


@dataclass(frozen=True)
class TraceSummary:
    requests: int
    span_s: float
    rate_per_s: float
    """Mean arrivals per second over the span."""
    peak_10s_over_mean: float
    """Busiest 10-second window's arrivals over the mean 10-second window's."""
    prompt_p50_tokens: int
    prompt_p99_tokens: int
    prompt_max_tokens: int
    output_p50_tokens: int
    output_p99_tokens: int
    long_share: float
    """Share of requests whose prompt has at least :data:`LONG_PROMPT_TOKENS` tokens."""
    long_prompt_token_share: float
    """Share of all prompt tokens that are in such prompts."""
    follow_up_share: float
    """Share of requests that are a later turn of a conversation (``prefix_tokens > 0``)."""
    prefix_token_share: float
    """Share of all prompt tokens a prefix cache could reuse."""

    def line(self) -> str:
        """One line for a terminal."""
        return (
            f"{self.requests} requests over {self.span_s / 60:.1f} min "
            f"({self.rate_per_s:.2f}/s, busiest 10 s x{self.peak_10s_over_mean:.1f}); prompt "
            f"p50 {self.prompt_p50_tokens} p99 {self.prompt_p99_tokens} max "
            f"{self.prompt_max_tokens}; output p50 {self.output_p50_tokens} p99 "
            f"{self.output_p99_tokens}; long (>= {LONG_PROMPT_TOKENS // 1024}k) "
            f"{self.long_share * 100:.1f}% of requests, {self.long_prompt_token_share * 100:.0f}"
            f"% of prompt tokens; follow-up turns {self.follow_up_share * 100:.0f}%, "
            f"reusable prefix {self.prefix_token_share * 100:.0f}% of prompt tokens"
        )


def summarize_trace(requests: Sequence[TraceRequest]) -> TraceSummary:
    """The summary of a non-empty trace (``ValueError`` on an empty one)."""
    if not requests:
        raise ValueError("an empty trace has no summary")
    n = len(requests)
    span = trace_span_s(requests)
    prompts = sorted(r.prompt_tokens for r in requests)
    outputs = sorted(r.output_tokens for r in requests)
    total_prompt = sum(prompts)
    long = [r.prompt_tokens for r in requests if r.prompt_tokens >= LONG_PROMPT_TOKENS]
    windows: dict[int, int] = {}
    start = requests[0].arrival_s
    for r in requests:
        w = int((r.arrival_s - start) // 10.0)
        windows[w] = windows.get(w, 0) + 1
    mean_window = n / max(math.ceil(span / 10.0), 1)
    return TraceSummary(
        requests=n,
        span_s=span,
        rate_per_s=n / span if span > 0 else math.inf,
        peak_10s_over_mean=max(windows.values()) / mean_window,
        prompt_p50_tokens=_rank(prompts, 0.5),
        prompt_p99_tokens=_rank(prompts, 0.99),
        prompt_max_tokens=prompts[-1],
        output_p50_tokens=_rank(outputs, 0.5),
        output_p99_tokens=_rank(outputs, 0.99),
        long_share=len(long) / n,
        long_prompt_token_share=sum(long) / total_prompt,
        follow_up_share=sum(1 for r in requests if r.prefix_tokens > 0) / n,
        prefix_token_share=sum(r.prefix_tokens for r in requests) / total_prompt,
    )


def _rank(sorted_values: Sequence[int], q: float) -> int:
    return sorted_values[min(max(math.ceil(q * len(sorted_values)) - 1, 0), len(sorted_values) - 1)]
