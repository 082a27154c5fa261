"""An engine's health as the router keeps it, without HTTP: failures, overload, progress."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tandem.router.selection import EJECT_BASE_S, EJECT_MAX_S, Endpoint


def endpoint() -> Endpoint:
    return Endpoint("http://10.0.0.1:8000", "decode")


def test_failures_while_ejected_are_one_incident() -> None:
    """Ten streams cut by one crash: one failure, a 1 s ejection (it was 10 and 30 s)."""
    e = endpoint()
    for i in range(10):
        e.record_failure(now_s=100.0 + i * 0.01)
    assert e.consecutive_failures == 1
    assert e.ejected_until_s == 100.0 + EJECT_BASE_S


def test_success_clears_the_ejection() -> None:
    e = endpoint()
    e.record_failure(now_s=0.0)
    assert not e.healthy(0.5)
    e.record_success()
    assert e.healthy(0.5) and e.consecutive_failures == 0


def test_overload_leaves_the_engine_out_without_counting_a_failure() -> None:
    e = endpoint()
    e.record_overload(now_s=10.0, for_s=3.0)
    assert not e.healthy(12.9) and e.healthy(13.0)
    assert e.consecutive_failures == 0
    e.record_overload(now_s=10.5, for_s=1.0)  # a shorter hint does not shorten the first
    assert e.ejected_until_s == 13.0


def test_progress_is_a_change_of_the_token_counters() -> None:
    e = endpoint()
    e.record_progress(None, now_s=1.0)
    assert e.progress_s == float("-inf")
    e.record_progress(100.0, now_s=2.0)
    e.record_progress(100.0, now_s=3.0)
    assert e.progress_s == 2.0
    e.record_progress(140.0, now_s=4.0)
    assert e.progress_s == 4.0


@given(st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=40))
def test_an_ejection_is_bounded_and_never_moved_by_failures_inside_it(
    times: list[float],
) -> None:
    e = endpoint()
    for now_s in sorted(times):
        before = e.ejected_until_s
        e.record_failure(now_s)
        if now_s < before:
            assert e.ejected_until_s == before
        else:
            assert now_s + EJECT_BASE_S <= e.ejected_until_s <= now_s + EJECT_MAX_S


def test_a_stall_needs_a_scrape_that_saw_the_counters_stand_still() -> None:
    """Sent at 10 s with a 2 s quiet limit and a 60 s blind limit: a scrape at 12.5 s that
    read the same counters proves the stall (deadline 12 s); without one (scrapes time out
    under load) the leg waits until 60 s after the last progress."""
    e = endpoint()
    e.record_progress(500.0, now_s=9.0)
    assert e.stall_deadline(10.0, 2.0, 60.0) == 70.0, "no scrape since the request: blind"
    e.record_progress(500.0, now_s=11.0)
    assert e.stall_deadline(10.0, 2.0, 60.0) == 70.0, "standing still for 1 s is no stall"
    e.record_progress(500.0, now_s=12.5)
    assert e.stall_deadline(10.0, 2.0, 60.0) == 12.0
    e.record_progress(540.0, now_s=13.0)  # it moved: the quiet time starts again
    assert e.stall_deadline(10.0, 2.0, 60.0) == 73.0
    e.record_progress(None, now_s=16.0)  # counters missing from the page: no evidence
    assert e.stall_deadline(10.0, 2.0, 60.0) == 73.0
    e.record_progress(540.0, now_s=16.0)
    assert e.stall_deadline(10.0, 2.0, 60.0) == 15.0


@given(
    st.lists(st.tuples(st.floats(0, 100), st.sampled_from([None, 1.0, 2.0])), max_size=20),
    st.floats(0, 100),
    st.floats(0.1, 10),
    st.floats(0.1, 100),
)
def test_a_stall_deadline_is_never_before_the_quiet_limit_nor_past_the_blind_one(
    scrapes: list[tuple[float, float | None]], since_s: float, quiet_s: float, blind_s: float
) -> None:
    e = endpoint()
    for now_s, total in sorted(scrapes, key=lambda s: s[0]):
        e.record_progress(total, now_s)
    quiet_from = max(e.progress_s, since_s)
    deadline = e.stall_deadline(since_s, quiet_s, blind_s)
    assert quiet_from + quiet_s <= deadline <= quiet_from + max(quiet_s, blind_s)
