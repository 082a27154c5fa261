"""The simulated server's real-time clock, on asyncio. Reads the monotonic and wall
clocks and sleeps; no other I/O.

:class:`AsyncioClock` reads the monotonic clock (the one asyncio's loop uses) and waits with
``asyncio.sleep``; with ``speedup`` k, simulated time runs k times faster than wall time, so a
modelled 20 ms iteration takes 2 ms at k = 10 while every reported latency stays in simulated
seconds. It satisfies the model's :class:`~tandem.engine.model.clock.Clock` protocol, whose
other clock is the virtual one (:class:`~tandem.engine.model.clock.VirtualClock`).
"""

from __future__ import annotations

import asyncio
import time


class AsyncioClock:
    """Simulated seconds = monotonic seconds x ``speedup``."""

    __slots__ = ("speedup",)

    def __init__(self, speedup: float = 1.0) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.speedup = speedup

    def now_s(self) -> float:
        return time.monotonic() * self.speedup

    async def sleep_until(self, t_s: float) -> None:
        """Sleep until simulated time ``t_s``; always yields to the loop at least once."""
        delay = (t_s - self.now_s()) / self.speedup
        await asyncio.sleep(delay if delay > 0 else 0)

    async def sleep(self, dt_s: float) -> None:
        """Sleep ``dt_s`` simulated seconds."""
        await asyncio.sleep(max(0.0, dt_s / self.speedup))

    def unix_time_at(self, t_s: float) -> float:
        """Wall-clock Unix time of simulated time ``t_s``."""
        return time.time() + (t_s - self.now_s()) / self.speedup
