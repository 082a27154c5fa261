"""The policy's state: recommendations kept compactly without changing any window."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.policy.state import PoolState


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(1, 4), min_size=1, max_size=120),
    interval=st.sampled_from([1.0, 5.0, 15.0]),
    windows=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_compact_recommendations_see_the_same_windows(
    values: list[int], interval: float, windows: tuple[int, int]
) -> None:
    up, down = (w * interval for w in windows)
    keep = max(up, down) + interval
    state, every = PoolState(), []
    for i, n in enumerate(values):
        now = i * interval
        state = state.with_recommendation(now, n, keep)
        every = [(t, m) for t, m in every if t >= now - keep] + [(now, n)]
        recs = state.recommendations
        assert len(recs) <= len(every) + 1  # at most the edge entry more
        for window in (up, down):
            start = now - window
            assert {m for t, m in recs if t >= start} == {m for t, m in every if t >= start}
            assert (recs[0][0] <= start) == (every[0][0] <= start)


def test_a_steady_recommendation_is_two_entries() -> None:
    state = PoolState()
    for t in range(0, 3600, 1):
        state = state.with_recommendation(float(t), 3, keep_s=301.0)
    assert len(state.recommendations) == 2
    assert state.recommendations[0][0] <= 3599 - 300  # the window is covered
