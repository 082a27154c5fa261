from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.api.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("800ms", 0.8),
        ("5s", 5.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("0s", 0.0),
        ("1.5s", 1.5),
        (15, 15.0),
        (0.25, 0.25),
    ],
)
def test_parse(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "5", "5 s", "-1s", "1d", "s", "5sm", True, None, [1], -3])
def test_parse_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


@given(st.integers(min_value=0, max_value=10**7))
def test_format_round_trips_milliseconds(ms: int) -> None:
    seconds = ms / 1000
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_format_picks_the_natural_unit() -> None:
    assert [format_duration(s) for s in (0.8, 30, 90, 300, 7200)] == [
        "800ms",
        "30s",
        "90s",
        "5m",
        "2h",
    ]
