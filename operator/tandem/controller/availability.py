"""Whether the API server answers, from the outcome of every request. No I/O.

A request that got no answer or a 5xx/429 counts as "down"; the first answered request
after a run of failures ends the outage. :meth:`ApiAvailability.observe` returns the
outage when it ends and lasted at least ``report_after_s``, so the caller can say so on
the objects it concerns once the API answers again (while it was down, nothing could be
said through it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class Outage:
    """From the first failed request to the first answer after it (wall-clock times)."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def describe(self) -> str:
        """``the API server did not answer from 12:00:01Z to 12:00:46Z (45 s)``."""
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        return (
            f"the API server did not answer from {self.start.strftime(fmt)} to "
            f"{self.end.strftime(fmt)} ({self.seconds:.0f} s)"
        )


def is_down(status: int) -> bool:
    """An answer that says the API server is not serving: none, throttled, or 5xx.

    >>> [is_down(s) for s in (0, 200, 404, 409, 429, 503)]
    [True, False, False, False, True, True]
    """
    return status == 0 or status == 429 or status >= 500


class ApiAvailability:
    """Tracks outages of one API server from request outcomes."""

    def __init__(
        self,
        report_after_s: float = 10.0,
        *,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.report_after_s = report_after_s
        self._wall = wall
        self._clock = clock
        self.down_since: datetime | None = None
        self._down_at = 0.0

    def observe(self, status: int) -> Outage | None:
        """Record one request's HTTP status (0: no answer); the outage it ends, if it
        lasted at least ``report_after_s``."""
        if is_down(status):
            if self.down_since is None:
                self.down_since, self._down_at = self._wall(), self._clock()
            return None
        if self.down_since is None:
            return None
        start, lasted = self.down_since, self._clock() - self._down_at
        self.down_since = None
        if lasted < self.report_after_s:
            return None
        return Outage(start, self._wall())
