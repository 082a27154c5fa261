"""The clock interface both drivers use, and the virtual clock. Pure.

The engine model never reads a clock: drivers read one and pass ``now_s``. A :class:`Clock`
gives the time in seconds and waits until a time. :class:`VirtualClock` (fleet simulator,
tests) jumps instead of waiting; the real-time asyncio clock lives in
``tandem.engine.server.realtime``.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic timeline, and a way to wait for a point on it."""

    def now_s(self) -> float:
        """Current time, seconds."""
        ...

    async def sleep_until(self, t_s: float) -> None:
        """Return once ``now_s() >= t_s``."""
        ...


class VirtualClock:
    """Time that moves only when told to. ``sleep_until`` jumps forward at once."""

    __slots__ = ("_now_s",)

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = start_s

    def now_s(self) -> float:
        return self._now_s

    def advance_to(self, t_s: float) -> None:
        """Move to ``t_s``; time never goes backwards (earlier values are ignored)."""
        if t_s > self._now_s:
            self._now_s = t_s

    def advance(self, dt_s: float) -> None:
        self.advance_to(self._now_s + dt_s)

    async def sleep_until(self, t_s: float) -> None:
        self.advance_to(t_s)
