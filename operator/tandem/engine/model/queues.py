"""The waiting queue under FCFS and priority scheduling. Pure.

Under FCFS, removal is eager (an abort is rare; admission, which is not, reads the head
directly). Under priority, removal is lazy: an aborted entry stays in the heap and is
skipped when it reaches the top, and ``Sequence.queued`` says whether an entry is live.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from tandem.engine.model.sequence import Sequence


class WaitingQueue:
    """Requests not yet running, in the order the policy admits them.

    FCFS: arrival order, preempted requests return to the front; a deque with eager
    removal (``fifo``, which the scheduler's admission reads directly: its head is the
    next request). Priority: lower ``priority`` first, ties by arrival (vLLM's semantics);
    preempted requests re-enter at their original key, so they come back ahead of later
    arrivals of the same priority; a heap with lazy removal.
    """

    __slots__ = ("_heap", "fifo", "live", "priority")

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self.fifo: deque[Sequence] | None = None if priority else deque()
        self._heap: list[tuple[int, int, Sequence]] = []
        self.live = 0

    def __len__(self) -> int:
        return self.live

    def __iter__(self) -> Iterator[Sequence]:
        """Live entries, in no particular order."""
        if self.fifo is not None:
            return iter(self.fifo)
        return (e[2] for e in self._heap if e[2].queued)

    def push(self, seq: Sequence) -> None:
        """Add a new arrival."""
        seq.queued = True
        self.live += 1
        if self.fifo is not None:
            self.fifo.append(seq)
        else:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))

    def push_front(self, seq: Sequence) -> None:
        """Return a preempted or re-admitted request ahead of new arrivals."""
        seq.queued = True
        self.live += 1
        if self.fifo is not None:
            self.fifo.appendleft(seq)
        else:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))

    def peek(self) -> Sequence | None:
        """The next request to admit, or None."""
        if self.fifo is not None:
            return self.fifo[0] if self.fifo else None
        heap = self._heap
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def pop(self) -> Sequence:
        """Remove and return the head (call after :meth:`peek` returned it)."""
        seq = self.fifo.popleft() if self.fifo is not None else heapq.heappop(self._heap)[2]
        seq.queued = False
        self.live -= 1
        return seq

    def discard(self, seq: Sequence) -> None:
        """Remove ``seq`` wherever it is (FCFS: at once; priority: lazily)."""
        if seq.queued:
            seq.queued = False
            self.live -= 1
            if self.fifo is not None:
                self.fifo.remove(seq)
