"""What the policy learns about a replica: prefill capacity and the decode step line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.engine.model import CostModel
from tandem.engine.model.presets import get_gpu, get_model
from tandem.observe.types import LatencyObservation, PoolObservation
from tandem.policy.learn import (
    CAPACITY_HALF_LIFE_S,
    StepFit,
    compute_batch_at_itl,
    compute_window_batch,
    learn_prefill_capacity,
    learn_step_fit,
)
from tests.policy.factories import make_pool


def prefill(ttft_mean_s: float | None, requests: float = 100.0) -> PoolObservation:
    latency = LatencyObservation(requests=requests, ttft_mean_s=ttft_mean_s, source="engine")
    return make_pool("prefill", 2, latency=latency)


def test_capacity_from_service_time_is_prompt_over_mean_ttft() -> None:
    # 1,000-token prompts answered in 40 ms on average: at least 25k tok/s per replica.
    learned = learn_prefill_capacity(None, prefill(0.040), 1000.0, 15.0)
    assert learned == pytest.approx(25_000.0)


def test_capacity_keeps_the_highest_lower_bound_and_forgets_it_slowly() -> None:
    busy = prefill(0.100)  # queueing made this window slow: 10k tok/s says little
    learned = learn_prefill_capacity(25_000.0, busy, 1000.0, 15.0)
    assert learned is not None and 24_900.0 < learned < 25_000.0
    later = learn_prefill_capacity(25_000.0, busy, 1000.0, CAPACITY_HALF_LIFE_S)
    assert later == pytest.approx(12_500.0)


def test_capacity_from_a_saturated_pool() -> None:
    # A queue at every ready pod: the pool runs at its capacity, 60k / 2 replicas.
    pool = make_pool("prefill", 2, waiting_requests=8, prompt_tokens_per_s=60_000.0)
    assert learn_prefill_capacity(None, pool, 0.0, 15.0) == pytest.approx(30_000.0)


def test_capacity_ignores_windows_with_few_requests_or_no_prompt_length() -> None:
    assert learn_prefill_capacity(None, prefill(0.04, requests=3), 1000.0, 15.0) is None
    assert learn_prefill_capacity(None, prefill(0.04), 0.0, 15.0) is None
    assert learn_prefill_capacity(None, prefill(None), 1000.0, 15.0) is None


def fitted(points: list[tuple[float, float]], tail: float = 1.0) -> StepFit:
    fit = StepFit()
    for batch, itl in points:
        fit = fit.add(batch, itl, tail, 1.0)
    return fit


def test_step_fit_recovers_a_line() -> None:
    fit = fitted([(b, 0.005 + 0.0002 * b) for b in (20.0, 60.0, 100.0, 140.0)])
    line = fit.line()
    assert line is not None
    assert line[0] == pytest.approx(0.005) and line[1] == pytest.approx(0.0002)


def test_step_fit_needs_batches_that_differ() -> None:
    assert fitted([(50.0, 0.015)] * 5).line() is None
    assert fitted([(50.0, 0.015)]).line() is None
    assert StepFit().tail_ratio == 1.0


def test_step_fit_round_trips_and_rejects_garbage() -> None:
    fit = fitted([(20.0, 0.01), (80.0, 0.02)], tail=1.2)
    assert StepFit.from_list(fit.to_list()) == fit
    assert StepFit.from_list([1, 2]) == StepFit()
    assert StepFit.from_list(["a"] * 6) == StepFit()
    assert StepFit.from_list(None) == StepFit()


def test_batch_at_itl_from_the_line_and_the_tail() -> None:
    # fixed 5 ms + 0.2 ms per sequence; the p90 is 1.1 x the mean: a 50 ms p90 target is
    # a 45.45 ms mean -> (45.45 - 5) / 0.2 = 202 sequences.
    fit = fitted([(b, 0.005 + 0.0002 * b) for b in (20.0, 60.0, 100.0)], tail=1.1)
    batch, proven = compute_batch_at_itl(fit, None, 0.05, 100.0, 0.5, 15.0)
    assert batch == pytest.approx((0.05 / 1.1 - 0.005) / 0.0002)
    assert proven == pytest.approx(100.0)  # 100 sequences met the target


def test_batch_at_itl_never_below_what_was_shown_nor_above_a_window_over_target() -> None:
    pessimistic = fitted([(20.0, 0.010), (40.0, 0.030)])  # a steep line: 50 ms at 60
    batch, _ = compute_batch_at_itl(pessimistic, 150.0, 0.05, 30.0, 0.4, 15.0)
    assert batch == pytest.approx(150.0, rel=0.01)  # proven earlier, kept
    optimistic = fitted([(20.0, 0.010), (40.0, 0.011)])
    batch, proven = compute_batch_at_itl(optimistic, 150.0, 0.05, 120.0, 1.5, 15.0)
    assert batch == pytest.approx(80.0)  # 120 sequences at 1.5 x the target: at most 80
    assert proven == pytest.approx(80.0)


def test_batch_at_itl_is_unknown_before_any_measurement() -> None:
    assert compute_batch_at_itl(StepFit(), None, 0.05, 0.0, None, 15.0) == (None, None)


def test_step_fit_skips_windows_with_tiny_batches_or_no_itl() -> None:
    assert learn_step_fit(StepFit(), 1.0, 0.01, 0.012, 15.0) == StepFit()
    assert learn_step_fit(StepFit(), 50.0, None, None, 15.0) == StepFit()
    assert learn_step_fit(StepFit(), 50.0, 0.02, 0.024, 15.0).weight == 1.0


def test_window_batch_is_tokens_per_second_times_the_mean_itl() -> None:
    # 3 replicas generating 9,000 tok/s at 40 ms a token: 360 sequences running, 120
    # each, whatever the running gauge read at the instant of the scrape.
    pool = make_pool("decode", 3, generation_tokens_per_s=9000.0, running_requests=600.0)
    assert compute_window_batch(pool, 0.04) == pytest.approx(120.0)
    assert compute_window_batch(pool, None) == pytest.approx(200.0)  # only the gauge


@given(st.sampled_from([500, 1000, 2000]), st.sampled_from([0.03, 0.05, 0.08]))
def test_learned_batch_matches_the_engine_model(context: int, itl_s: float) -> None:
    """Windows at a spread of batches of the engine model's decode step teach the policy
    the batch the engine model itself says meets the target (within 5 %)."""
    cost = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))
    fit = StepFit()
    for batch in (16, 32, 48, 64, 96):
        fit = fit.add(float(batch), cost.decode_step_s(batch, context), 1.0, 1.0)
    batch_at_target, _ = compute_batch_at_itl(fit, None, itl_s, 0.0, None, 15.0)
    truth = max(b for b in range(1, 2000) if cost.decode_step_s(b, context) <= itl_s)
    assert batch_at_target == pytest.approx(truth, rel=0.05)


def test_step_fit_separates_the_kv_cost_from_the_batch() -> None:
    # Windows at short and long contexts of the engine model's decode step: a line in the
    # batch alone takes the long contexts for a steep batch cost; the plane prices the
    # batch at the context asked for.
    cost = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))
    fit = StepFit()
    for batch, context in ((8, 2000), (24, 20000), (40, 4000), (12, 30000), (64, 1000)):
        fit = fit.add(float(batch), cost.decode_step_s(batch, context), 1.0, 1.0, batch * context)
    for context in (1000, 8000, 30000):
        batch, _ = compute_batch_at_itl(fit, None, 0.05, 0.0, None, 15.0, float(context))
        truth = max(b for b in range(1, 2000) if cost.decode_step_s(b, context) <= 0.05)
        assert batch == pytest.approx(truth, rel=0.1), context
    plane = fit.plane()
    assert plane is not None and plane[2] > 0


def test_step_fit_reads_the_sums_older_versions_stored() -> None:
    old = fitted([(20.0, 0.01), (80.0, 0.02)]).to_list()[:6]
    fit = StepFit.from_list(old)
    assert fit.line() == pytest.approx((0.01 - 20 * 0.01 / 60, 0.01 / 60))
