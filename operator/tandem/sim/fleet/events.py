"""Events, the virtual clock and the heap that orders them. Pure: no I/O, no clock reads.

Only events move time. An event is a plain tuple ``(time_s, seq, kind, target)``: when
it fires, the handler registered for ``kind`` is called with ``(time_s, target)`` and
returns the events it causes (an iterable, possibly empty); the loop pushes those. A
handler never pushes events itself and never reads a clock: ``time_s`` is its "now".

``seq`` is a counter taken when an event is pushed, so events at the same instant fire
in the order they were created and a run is deterministic. Tuples, not objects, keep the
heap operations cheap: the loop handles millions of events per simulated hour.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

#: ``(time_s, kind, target)``: what a handler returns for each event it causes.
NewEvent = tuple[float, int, Any]
#: A handler: ``(now_s, target) -> new events``.
Handler = Callable[[float, Any], Iterable[NewEvent]]


class EventQueue:
    """A min-heap of events and the virtual clock it drives (seconds)."""

    __slots__ = ("_heap", "_seq", "fired", "now_s")

    def __init__(self, start_s: float = 0.0) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.now_s = start_s
        """Time of the event being handled (or last handled), seconds."""
        self.fired = 0
        """Events handled so far."""

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time_s: float, kind: int, target: Any) -> None:
        """Schedule one event; ``ValueError`` for a time before the clock (causality)."""
        if time_s < self.now_s:
            raise ValueError(f"event of kind {kind} at {time_s} s is before now ({self.now_s} s)")
        self._seq += 1
        heapq.heappush(self._heap, (time_s, self._seq, kind, target))

    def extend(self, events: Iterable[NewEvent]) -> None:
        for time_s, kind, target in events:
            self.push(time_s, kind, target)

    def peek_time_s(self) -> float | None:
        """When the next event fires, or None when the queue is empty."""
        return self._heap[0][0] if self._heap else None

    def run(self, handlers: dict[int, Handler], until_s: float | None = None) -> None:
        """Fire events in time order until the queue is empty or the next is past ``until_s``.

        The loop is the simulator's hot path: it inlines the push of returned events.
        """
        heap = self._heap
        pop, push = heapq.heappop, heapq.heappush
        limit = float("inf") if until_s is None else until_s
        seq = self._seq
        fired = 0
        try:
            while heap and heap[0][0] <= limit:
                now, _, kind, target = pop(heap)
                self.now_s = now
                fired += 1
                for time_s, new_kind, new_target in handlers[kind](now, target):
                    if time_s < now:
                        raise ValueError(
                            f"handler for kind {kind} returned an event at {time_s} s, "
                            f"before now ({now} s)"
                        )
                    seq += 1
                    push(heap, (time_s, seq, new_kind, new_target))
        finally:
            self._seq = seq
            self.fired += fired
