"""Histogram deltas, merges and percentiles (PromQL ``histogram_quantile`` semantics)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.observe.histogram import (
    INF,
    Histogram,
    compute_histogram_delta,
    compute_percentiles,
    compute_quantile,
    merge_histograms,
    parse_histogram,
)
from tandem.observe.text import parse_exposition


def make_histogram(*buckets: tuple[float, float], total: float | None = None) -> Histogram:
    rows = list(buckets)
    rows.append((INF, total if total is not None else rows[-1][1]))
    return Histogram(buckets=tuple(rows))


def test_worked_example_interpolates_inside_the_bucket() -> None:
    h = make_histogram((0.1, 2), (0.5, 10))
    assert compute_quantile(h, 0.5) == pytest.approx(0.25)
    assert compute_quantile(h, 0.1) == pytest.approx(0.1 * 1 / 2)  # first bucket from 0


def test_rank_in_inf_bucket_answers_the_highest_finite_bound() -> None:
    h = make_histogram((0.1, 2), (0.5, 4), total=10)
    assert compute_quantile(h, 0.99) == 0.5


def test_no_observations_means_no_percentile() -> None:
    assert compute_quantile(make_histogram((0.1, 0), (0.5, 0)), 0.9) is None
    assert compute_quantile(None, 0.9) is None
    assert compute_quantile(Histogram(buckets=((INF, 5.0),)), 0.9) is None
    assert compute_percentiles(make_histogram((0.1, 0))) == {}


def test_quantile_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="within"):
        compute_quantile(make_histogram((1, 1)), 1.5)


def test_percentiles_by_integer_key() -> None:
    h = make_histogram((1.0, 100))
    assert compute_percentiles(h, (50, 90)) == {50: pytest.approx(0.5), 90: pytest.approx(0.9)}


def test_delta_subtracts_and_a_shrinking_bucket_means_restart() -> None:
    before = Histogram(buckets=((0.1, 2), (INF, 5)), sum=1.0)
    after = Histogram(buckets=((0.1, 3), (INF, 9)), sum=2.5)
    assert compute_histogram_delta(before, after) == Histogram(((0.1, 1), (INF, 4)), sum=1.5)
    restarted = Histogram(buckets=((0.1, 1), (INF, 1)), sum=0.05)
    assert compute_histogram_delta(before, restarted) == restarted
    rebucketed = Histogram(buckets=((0.2, 8), (INF, 9)), sum=2.5)
    assert compute_histogram_delta(before, rebucketed) == rebucketed
    assert compute_histogram_delta(None, after) == after


def test_merge_sums_matching_bounds_and_keeps_unknown_bounds_cumulative() -> None:
    a = Histogram(buckets=((0.1, 1), (1.0, 3), (INF, 4)), sum=1.0)
    b = Histogram(buckets=((0.5, 2), (INF, 2)), sum=0.5)
    merged = merge_histograms([a, None, b])
    assert merged == Histogram(
        buckets=((0.1, 1), (0.5, 3), (1.0, 5), (INF, 6)),
        sum=1.5,
    )
    assert merge_histograms([None]) is None


def test_parse_sums_label_sets_filters_and_fills_inf_from_count() -> None:
    page = parse_exposition(
        'h_bucket{c="a",le="0.1"} 1\nh_bucket{c="a",le="+Inf"} 2\n'
        'h_bucket{c="b",le="0.1"} 5\nh_bucket{c="b",le="+Inf"} 5\n'
        'h_count{c="a"} 2\nh_count{c="b"} 5\nh_sum{c="a"} 0.3\nh_sum{c="b"} 0.2\n'
        'g:h_bucket{le="1"} 3\ng:h_count 4\n'
    ).by_name()
    assert parse_histogram(page, "h") == Histogram(((0.1, 6), (INF, 7)), sum=0.5)
    assert parse_histogram(page, "h", {"c": "a"}) == Histogram(((0.1, 1), (INF, 2)), sum=0.3)
    assert parse_histogram(page, "g:h") == Histogram(((1.0, 3), (INF, 4)))
    assert parse_histogram(page, "missing") is None


@st.composite
def histograms(draw: st.DrawFn) -> Histogram:
    bounds = draw(
        st.lists(
            st.floats(min_value=1e-4, max_value=1e4), min_size=1, max_size=12, unique=True
        ).map(sorted)
    )
    increments = draw(
        st.lists(st.integers(0, 50), min_size=len(bounds) + 1, max_size=len(bounds) + 1)
    )
    counts = [float(sum(increments[: i + 1])) for i in range(len(increments))]
    return Histogram(buckets=tuple(zip([*bounds, INF], counts, strict=True)))


quantiles = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=300)
@given(h=histograms(), q1=quantiles, q2=quantiles)
def test_quantile_is_monotone_in_q(h: Histogram, q1: float, q2: float) -> None:
    low, high = sorted((q1, q2))
    a, b = compute_quantile(h, low), compute_quantile(h, high)
    if h.count == 0:
        assert a is None and b is None
    else:
        assert a is not None and b is not None
        assert a <= b + 1e-9 * max(1.0, abs(b))


@settings(max_examples=300)
@given(h=histograms(), q=quantiles)
def test_quantile_lies_within_the_bucket_holding_the_rank(h: Histogram, q: float) -> None:
    value = compute_quantile(h, q)
    if h.count == 0:
        assert value is None
        return
    assert value is not None and math.isfinite(value)
    rank = q * h.count
    finite = h.buckets[:-1]
    holding = next((i for i, (_, c) in enumerate(finite) if c >= rank and c > 0), None)
    if holding is None:
        assert value == finite[-1][0]
        return
    lower = finite[holding - 1][0] if holding > 0 else 0.0
    upper = finite[holding][0]
    assert lower - 1e-9 <= value <= upper + 1e-9


@settings(max_examples=200)
@given(before=histograms(), extra=st.lists(st.integers(0, 20), min_size=13, max_size=13))
def test_delta_of_growth_is_the_growth(before: Histogram, extra: list[int]) -> None:
    added = [float(sum(extra[: i + 1])) for i in range(len(before.buckets))]
    after = Histogram(
        buckets=tuple(
            (bound, count + add) for (bound, count), add in zip(before.buckets, added, strict=True)
        )
    )
    delta = compute_histogram_delta(before, after)
    assert [c for _, c in delta.buckets] == added
    assert all(c >= 0 for _, c in delta.buckets)
