"""The waiting queue under FCFS and priority scheduling. Pure.

Removal is lazy: an aborted entry stays in the container and is skipped when it reaches the
head, so abort is O(1). ``Sequence.queued`` says whether an entry is live.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from tandem.engine.model.sequence import Sequence


class WaitingQueue:
    """Requests not yet running, in the order the policy admits them.

    FCFS: arrival order, preempted requests return to the front. Priority: lower
    ``priority`` first, ties by arrival (vLLM's semantics); preempted requests re-enter at
    their original key, so they come back ahead of later arrivals of the same priority.
    """

    __slots__ = ("_deque", "_heap", "_live", "priority")

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self._deque: deque[Sequence] = deque()
        self._heap: list[tuple[int, int, Sequence]] = []
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def __iter__(self) -> Iterator[Sequence]:
        """Live entries, in no particular order."""
        entries = (e[2] for e in self._heap) if self.priority else iter(self._deque)
        return (seq for seq in entries if seq.queued)

    def push(self, seq: Sequence) -> None:
        """Add a new arrival."""
        seq.queued = True
        self._live += 1
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._deque.append(seq)

    def push_front(self, seq: Sequence) -> None:
        """Return a preempted or re-admitted request ahead of new arrivals."""
        seq.queued = True
        self._live += 1
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._deque.appendleft(seq)

    def peek(self) -> Sequence | None:
        """The next request to admit, or None."""
        if self.priority:
            heap = self._heap
            while heap and not heap[0][2].queued:
                heapq.heappop(heap)
            return heap[0][2] if heap else None
        dq = self._deque
        while dq and not dq[0].queued:
            dq.popleft()
        return dq[0] if dq else None

    def pop(self) -> Sequence:
        """Remove and return the head (call after :meth:`peek` returned it)."""
        seq = heapq.heappop(self._heap)[2] if self.priority else self._deque.popleft()
        seq.queued = False
        self._live -= 1
        return seq

    def discard(self, seq: Sequence) -> None:
        """Remove ``seq`` wherever it is (lazily)."""
        if seq.queued:
            seq.queued = False
            self._live -= 1
