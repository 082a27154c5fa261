"""The steady set: decoding sequences kept implicit, with O(1) aggregates. Pure, internal.

A decode pool spends almost all its iterations on sequences that each compute one token,
sample one token and, every ``block_size`` tokens, take one more KV block. Visiting each
of them every iteration costs tens of millions of Python-level updates for a scaled
one-hour trace. A *steady* sequence computes one token and samples one token every
iteration, so its context at scheduling pass ``g`` is ``c0 + (g - g0)`` for the
``(c0, g0)`` recorded when it joined. :class:`SteadySet` keeps what an iteration needs of
all of them without visiting any:

* ``count``, and the KV read ``sum(c0) + count*g - sum(g0)``;
* blocks to allocate at ``g``: a sequence needs one when its context is a multiple of the
  block size, i.e. when ``g = g0 - c0 (mod block_size)``: a count per residue;
* who finishes at ``g``: a heap keyed by the pass of each one's last token.

Worked example (block size 16): a sequence joining at ``g0 = 10`` with ``c0 = 31`` has
residue ``(10 - 31) mod 16 = 11``; at ``g = 11`` its context is 32, a multiple of 16, and
``11 mod 16 = 11``: that iteration it takes a block.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from tandem.engine.model.sequence import Sequence


class SteadySet:
    """Aggregates over the steady sequences of one engine."""

    __slots__ = ("block_size", "count", "heap", "residue", "sum_c0", "sum_g0")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.count = 0
        self.sum_c0 = 0
        self.sum_g0 = 0
        self.residue = [0] * block_size
        self.heap: list[tuple[int, int, int, Sequence]] = []
        """(pass of the last token, order, version, sequence), lazily invalidated."""

    def add(self, seq: Sequence, g0: int) -> None:
        """``seq`` (its counts current) decodes one token per iteration from pass ``g0``."""
        seq.steady = True
        seq.c0, seq.g0, seq.out0 = seq.num_computed, g0, seq.num_output
        seq.version += 1
        self.count += 1
        self.sum_c0 += seq.num_computed
        self.sum_g0 += g0
        self.residue[(g0 - seq.num_computed) % self.block_size] += 1
        last = g0 + seq.limit - seq.num_output - 1
        heapq.heappush(self.heap, (last, seq.order, seq.version, seq))

    def remove(self, seq: Sequence) -> None:
        """``seq`` leaves the set (its heap entry goes stale)."""
        seq.steady = False
        seq.version += 1
        self.count -= 1
        self.sum_c0 -= seq.c0
        self.sum_g0 -= seq.g0
        self.residue[(seq.g0 - seq.c0) % self.block_size] -= 1

    def clear(self) -> None:
        """Forget every member (the caller made them explicit)."""
        self.count = self.sum_c0 = self.sum_g0 = 0
        self.residue = [0] * self.block_size
        self.heap = []

    def kv_read(self, g: int) -> int:
        """Context tokens the members attend to at pass ``g``."""
        return self.sum_c0 + self.count * g - self.sum_g0

    def blocks_needed(self, g: int) -> int:
        """Members that take a new block at pass ``g``."""
        return self.residue[g % self.block_size] if self.count else 0

    def due_at(self, g: int) -> bool:
        """Whether a member's last token is pass ``g``'s. Entries for earlier passes can
        only be stale (their sequence left the set before its last pass): dropped."""
        heap = self.heap
        while heap and heap[0][0] < g:
            heapq.heappop(heap)
        return bool(heap) and heap[0][0] == g

    def pop_due(self, g: int) -> Iterator[Sequence]:
        """Members whose last token is pass ``g``'s, removed from the set."""
        heap = self.heap
        while heap and heap[0][0] == g:
            _, _, version, seq = heapq.heappop(heap)
            if version != seq.version or not seq.steady:
                continue
            self.remove(seq)
            yield seq
