"""Least latencies and the verdict on each request: infeasible ones apart, the queueing
ratio of the others (tandem.policy.feasibility)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.policy.config import LatencyTargets
from tandem.policy.feasibility import (
    BANDS,
    LEAST_HALF_LIFE_S,
    MIN_BAND_SAMPLES,
    MIN_TPOT_SAMPLES,
    LeastLatency,
    compute_band,
    judge_request,
)

TARGETS = LatencyTargets(1.0, 90, 0.05, 90)


def learned(per_token_s: float, prompt: int, n: int = MIN_BAND_SAMPLES) -> LeastLatency:
    """A model that served ``n`` prompts of ``prompt`` tokens at ``per_token_s`` each."""
    least = LeastLatency()
    for _ in range(n):
        least.observe_service(prompt, per_token_s * prompt, 0.0)
    return least


def test_bands_are_powers_of_two() -> None:
    assert [compute_band(n) for n in (1, 511, 512, 2047, 2048, 131_071, 131_072)] == [
        0,
        0,
        1,
        2,
        3,
        8,
        9,
    ]
    assert compute_band(10**9) == BANDS - 1


def test_the_least_service_seen_is_the_least_ttft() -> None:
    least = LeastLatency()
    for service_s in (0.9, 0.5, 0.7):  # queueing only ever adds
        least.observe_service(10_000, service_s, 0.0)
    assert least.least_ttft_s(10_000, 0.0) == pytest.approx(0.5)
    assert least.least_ttft_s(12_000, 0.0) == pytest.approx(0.6)  # per token, in its band


def test_a_band_with_few_samples_borrows_the_fastest_band() -> None:
    least = learned(40e-6, 2_000)  # 40 us a token for 2k prompts, trusted
    for _ in range(3):  # three slow 64k prompts: not enough to trust
        least.observe_service(64_000, 64_000 * 90e-6, 0.0)
    # The 64k band is not trusted yet: the most optimistic time per token stands in.
    assert least.least_ttft_s(64_000, 0.0) == pytest.approx(64_000 * 40e-6)
    for _ in range(MIN_BAND_SAMPLES):
        least.observe_service(64_000, 64_000 * 90e-6, 0.0)
    assert least.least_ttft_s(64_000, 0.0) == pytest.approx(64_000 * 90e-6)


def test_a_declared_rate_is_a_floor_from_the_first_request() -> None:
    least = LeastLatency(declared_tokens_per_s=20_000.0)
    assert least.least_ttft_s(30_000, 0.0) == pytest.approx(1.5)
    assert least.prefill_tokens_per_s(0.0) == 20_000.0
    assert judge_request(least, 30_000, 1.6, TARGETS, 0.0).ttft_infeasible


def test_what_was_learned_is_forgotten_slowly() -> None:
    least = learned(50e-6, 4_000)
    later = LEAST_HALF_LIFE_S
    assert least.least_ttft_s(4_000, later) == pytest.approx(2 * 0.2)
    least.observe_service(4_000, 0.3, later)  # a new least after forgetting
    assert least.least_ttft_s(4_000, later) == pytest.approx(0.3)


def test_nothing_learned_judges_nothing_infeasible() -> None:
    verdict = judge_request(LeastLatency(), 1_000_000, 30.0, TARGETS, 0.0)
    assert verdict.feasible and verdict.least_ttft_s == 0.0
    assert verdict.queueing_ratio == pytest.approx(30.0)  # TTFT over target, as before


def test_a_prompt_too_long_for_the_target_is_infeasible() -> None:
    least = learned(45e-6, 30_000)
    verdict = judge_request(least, 30_000, 1.4, TARGETS, 0.0)
    assert verdict.ttft_infeasible and not verdict.feasible
    assert verdict.queueing_ratio is None
    assert verdict.target_ratio == pytest.approx(1.4)


def test_a_per_token_allowance_makes_long_prompts_feasible() -> None:
    least = learned(45e-6, 30_000)
    per_token = LatencyTargets(1.0, 90, 0.05, 90, ttft_per_prompt_token_s=50e-6)
    verdict = judge_request(least, 30_000, 1.9, per_token, 0.0)
    # target 1 + 1.5 = 2.5 s, least 1.35 s: (1.9 - 1.35) / (2.5 - 1.35)
    assert verdict.feasible and verdict.target_s == pytest.approx(2.5)
    assert verdict.queueing_ratio == pytest.approx(0.55 / 1.15)
    assert verdict.target_ratio == pytest.approx(1.9 / 2.5)


def test_an_itl_target_below_the_least_itl_is_infeasible_for_every_request() -> None:
    least = LeastLatency()
    for _ in range(MIN_TPOT_SAMPLES - 1):
        least.observe_tpot(0.08, 0.0)
    assert not judge_request(least, 100, 0.2, TARGETS, 0.0).itl_infeasible  # too few yet
    least.observe_tpot(0.07, 0.0)
    verdict = judge_request(least, 100, 0.2, TARGETS, 0.0)
    assert verdict.itl_infeasible and not verdict.ttft_infeasible
    assert verdict.queueing_ratio is not None  # its TTFT still counts


def test_no_ttft_target_no_ttft_verdict() -> None:
    verdict = judge_request(learned(1e-3, 2_000), 2_000, 5.0, LatencyTargets(None, 90, None, 90), 0)
    assert verdict.feasible and verdict.queueing_ratio is None and verdict.target_s is None


prompts = st.integers(1, 200_000)
per_token = st.floats(1e-6, 1e-3)


@settings(max_examples=300, deadline=None)
@given(prompts, per_token, st.floats(0, 60), st.floats(0.05, 10), st.floats(0, 1e-4))
def test_the_queueing_ratio_is_at_most_one_exactly_when_the_target_is_met(
    prompt: int, per_token_s: float, wait_s: float, budget_s: float, allowance_s: float
) -> None:
    least = learned(per_token_s, prompt)
    targets = LatencyTargets(budget_s, 90, None, 90, ttft_per_prompt_token_s=allowance_s)
    ttft = least.least_ttft_s(prompt, 0.0) + wait_s
    verdict = judge_request(least, prompt, ttft, targets, 0.0)
    target = budget_s + allowance_s * prompt
    if verdict.ttft_infeasible:
        assert least.least_ttft_s(prompt, 0.0) >= target
    else:
        assert verdict.queueing_ratio is not None
        assert (verdict.queueing_ratio <= 1.0 + 1e-9) == (ttft <= target + 1e-9 * target)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(prompts, st.floats(1e-3, 100)), min_size=1, max_size=60), prompts)
def test_the_least_never_exceeds_a_service_seen_in_the_band(
    services: list[tuple[int, float]], prompt: int
) -> None:
    """Learning only lowers the least below what was seen at the same time per token, so
    a request served like one already seen is never called infeasible for it."""
    least = LeastLatency()
    for p, s in services:
        least.observe_service(p, s, 0.0)
    for p, s in services:
        assert least.least_ttft_s(p, 0.0) <= s * (1 + 1e-9)
