"""Rate scaling and the warm-up: deterministic, shape-preserving."""

from __future__ import annotations

import itertools

import pytest

from tandem.traces.parse import TraceRequest
from tandem.traces.rate import scale_rate, with_warmup
from tests.sim.factories import make_trace


def test_scale_multiplies_the_count_and_keeps_the_span() -> None:
    base = make_trace(2000, rate_per_s=20.0)
    scaled = scale_rate(base, 2.5, seed=3)
    assert len(scaled) == pytest.approx(2.5 * len(base), rel=0.03)
    assert scaled[0].arrival_s == base[0].arrival_s
    assert scaled[-1].arrival_s <= base[-1].arrival_s + 1.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(scaled))
    assert {(r.prompt_tokens, r.output_tokens) for r in scaled} <= {
        (r.prompt_tokens, r.output_tokens) for r in base
    }


def test_scale_is_deterministic_for_a_seed() -> None:
    base = make_trace(300)
    assert scale_rate(base, 3.3, seed=7) == scale_rate(base, 3.3, seed=7)
    assert scale_rate(base, 3.3, seed=7) != scale_rate(base, 3.3, seed=8)


def test_scale_below_one_thins() -> None:
    base = make_trace(4000)
    assert len(scale_rate(base, 0.25, seed=1)) == pytest.approx(1000, rel=0.1)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_scale_rejects_nonsense(bad: float) -> None:
    with pytest.raises(ValueError, match="rate scale"):
        scale_rate(make_trace(10), bad)


def test_warmup_mirrors_the_head_before_the_trace() -> None:
    trace = [TraceRequest(t, 100 + i, 5) for i, t in enumerate([0.0, 1.0, 4.0, 9.0])]
    arrivals, first, offset = with_warmup(trace, 5.0)
    assert offset == 5.0
    assert first == 3  # the requests of the first 5 s, mirrored
    assert [r.arrival_s for r in arrivals[:first]] == [1.0, 4.0, 5.0]
    assert [r.prompt_tokens for r in arrivals[:first]] == [102, 101, 100]
    assert [r.arrival_s for r in arrivals[first:]] == [5.0, 6.0, 9.0, 14.0]
    assert with_warmup(trace, 0.0) == (trace, 0, 0.0)
