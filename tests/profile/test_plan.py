"""The sweep a profile sends, the prompts, and what a point measured."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tandem.profile.plan import PROMPT_IDS, SweepLimits, build_prompt, build_sweep, build_warmup
from tandem.profile.points import PointResult, RequestTiming, percentile

LIMITS = st.builds(
    SweepLimits,
    max_model_len=st.integers(64, 131072),
    max_num_seqs=st.integers(1, 1024),
    max_num_batched_tokens=st.integers(256, 65536),
    max_concurrency=st.integers(1, 512),
)


@given(LIMITS, st.booleans())
def test_the_sweep_stays_within_what_the_engine_takes(limits: SweepLimits, quick: bool) -> None:
    points = build_sweep(limits, quick)
    prefill = [p for p in points if p.kind == "prefill"]
    decode = [p for p in points if p.kind == "decode"]
    assert len(prefill) >= 2 and len(decode) >= 1
    for p in points:
        assert p.prompt_tokens + p.output_tokens <= max(limits.max_model_len, 24)
        assert 1 <= p.concurrency <= max(1, min(limits.max_num_seqs, limits.max_concurrency))
    assert all(p.concurrency == 1 and p.output_tokens == 1 for p in prefill)
    lengths = [p.prompt_tokens for p in prefill]
    assert lengths == sorted(set(lengths)) and lengths[0] == 16
    shortest = min(p.prompt_tokens for p in decode)
    short = [p for p in decode if p.prompt_tokens == shortest]
    # a short-prompt wave's prompts fit one token budget: it decodes as one batch
    assert all(p.prompt_tokens * p.concurrency < limits.max_num_batched_tokens or
               p.prompt_tokens == 8 for p in short)  # fmt: skip
    assert len({p.concurrency for p in short}) == len(short), "one wave size each"


def test_quick_is_shorter() -> None:
    limits = SweepLimits(4096, 256, 8192)
    full, quick = build_sweep(limits), build_sweep(limits, quick=True)
    assert sum(p.requests for p in quick) < sum(p.requests for p in full) / 2
    assert {p.kind for p in quick} == {"prefill", "decode"}


def test_the_warm_up_sends_each_shape_once_and_briefly() -> None:
    points = build_sweep(SweepLimits(2048, 64, 2048), quick=True)
    warmup = build_warmup(points)
    assert len(warmup) == len({(p.kind, p.prompt_tokens, p.concurrency) for p in points})
    assert all(w.repeats == 1 and w.output_tokens <= 4 for w in warmup)


@given(st.integers(0, 2**40), st.integers(1, 3000))
def test_prompts_have_the_length_asked_and_ordinary_ids(seed: int, tokens: int) -> None:
    prompt = build_prompt(seed, tokens)
    assert len(prompt) == tokens and all(PROMPT_IDS[0] <= t < PROMPT_IDS[1] for t in prompt)


def test_prompts_of_different_requests_share_no_prefix_block() -> None:
    """Distinct within their first 16 tokens (a KV block): no prefix cache hit."""
    heads = {tuple(build_prompt(seed, 16)) for seed in range(5000)}
    assert len(heads) == 5000


def test_a_requests_itl_is_its_mean_gap_by_the_engines_token_count() -> None:
    timing = RequestTiming(prompt_tokens=10, output_tokens=5, ttft_s=0.1, last_token_s=0.5)
    assert math.isclose(timing.itl_s or 0.0, 0.1)
    assert RequestTiming(10, 1, 0.1, 0.1).itl_s is None


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=50), st.floats(0.0, 100.0))
def test_percentiles_lie_between_the_extremes(values: list[float], q: float) -> None:
    assert min(values) <= percentile(values, q) <= max(values)
    assert percentile(values, 0) == min(values) and percentile(values, 100) == max(values)


def test_a_point_is_observed_by_its_median() -> None:
    from tandem.profile.plan import PointSpec

    prefill = PointSpec("prefill", 100, 1, 1, 3)
    timings = tuple(RequestTiming(100, 1, t, t) for t in (0.1, 0.2, 9.0))
    assert PointResult(prefill, timings).observed_s == 0.2
    decode = PointSpec("decode", 30, 3, 3, 1)
    timings = tuple(RequestTiming(30, 3, 0.0, 2 * g) for g in (0.01, 0.02, 5.0))
    assert math.isclose(PointResult(decode, timings).observed_s, 0.02)
