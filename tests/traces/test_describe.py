"""A trace's summary: counted on requests built in code."""

from __future__ import annotations

import pytest

from tandem.traces.describe import LONG_PROMPT_TOKENS, summarize_trace
from tandem.traces.parse import TraceRequest


def test_the_summary_counts_what_it_says() -> None:
    trace = [TraceRequest(float(t), 1000, 100) for t in range(0, 100, 10)]  # 1 per 10 s
    trace += [TraceRequest(50.0 + i / 10, 1000, 100) for i in range(10)]  # 10 more in one
    trace += [
        TraceRequest(99.0, LONG_PROMPT_TOKENS, 10, 1, 0),
        TraceRequest(99.5, LONG_PROMPT_TOKENS + 500, 10, 1, LONG_PROMPT_TOKENS + 10),
    ]
    trace.sort(key=lambda r: r.arrival_s)
    s = summarize_trace(trace)
    assert s.requests == 22 and s.span_s == 99.5
    assert s.peak_10s_over_mean == pytest.approx(11 / 2.2)  # 11 in 50-60 s; 22 over 10 windows
    assert s.long_share == pytest.approx(2 / 22)
    total = 20 * 1000 + 2 * LONG_PROMPT_TOKENS + 500
    assert s.long_prompt_token_share == pytest.approx((2 * LONG_PROMPT_TOKENS + 500) / total)
    assert s.follow_up_share == pytest.approx(1 / 22)
    assert s.prefix_token_share == pytest.approx((LONG_PROMPT_TOKENS + 10) / total)
    assert s.prompt_max_tokens == LONG_PROMPT_TOKENS + 500 and s.prompt_p50_tokens == 1000
    assert "22 requests over 1.7 min" in s.line()


def test_an_empty_trace_has_no_summary() -> None:
    with pytest.raises(ValueError, match="empty trace"):
        summarize_trace([])
