"""Outages of the API server, from request outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tandem.controller.availability import ApiAvailability


def test_an_outage_is_reported_once_when_it_ends_and_only_when_long_enough() -> None:
    now = {"mono": 0.0}
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    api = ApiAvailability(
        10.0, clock=lambda: now["mono"], wall=lambda: t0 + timedelta(seconds=now["mono"])
    )
    assert api.observe(200) is None and api.down_since is None
    assert api.observe(503) is None and api.down_since == t0
    now["mono"] = 5.0
    assert api.observe(0) is None  # still down: the start stays the first failure
    now["mono"] = 45.0
    outage = api.observe(404)  # any answer that is not a server failure ends it
    assert outage is not None and outage.seconds == 45.0
    assert "did not answer from 2026-01-01T00:00:00Z to 2026-01-01T00:00:45Z (45 s)" in (
        outage.describe()
    )
    assert api.observe(200) is None
    assert api.observe(429) is None
    now["mono"] = 48.0
    assert api.observe(200) is None, "3 s is below the threshold"
