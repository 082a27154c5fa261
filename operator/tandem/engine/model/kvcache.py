"""Paged KV cache: block accounting with prefix reuse by block hash. Pure.

Blocks are counted, not materialised: a sequence owns ``private`` blocks (a count) plus a list
of *shared* blocks named by their prefix hash. A hashed block whose last owner finished stays
cached but evictable (LRU); it counts as free for allocation, as in vLLM, where
``kv_cache_usage_perc`` is ``1 - free / total`` and cached-but-unused blocks sit in the free
queue. Invariant: ``free + evictable + private_held + shared_held == num_blocks``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class KVCache:
    """Block pool of ``num_blocks`` blocks of ``block_size`` tokens."""

    __slots__ = (
        "_evictable", "_free", "_ref", "block_size", "evictions", "num_blocks", "num_free_blocks",
    )  # fmt: skip

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = num_blocks
        self._ref: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.num_free_blocks = num_blocks
        """Blocks an allocation can take (never used, or cached with no owner); kept as a
        count rather than computed, since the scheduler reads it every iteration."""
        self.evictions = 0
        """Cached blocks evicted to make room, a counter."""

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        """Used / total, 0-1."""
        return self.num_used_blocks / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Hashed blocks known to the prefix cache (owned or evictable)."""
        return len(self._ref) + len(self._evictable)

    def allocate(self, n: int) -> bool:
        """Take ``n`` private blocks, evicting cached ones if needed; False if they don't fit."""
        if n <= self._free:
            self._free -= n
            self.num_free_blocks -= n
            return True
        if n > self.num_free_blocks:
            return False
        for _ in range(n - self._free):
            self._evictable.popitem(last=False)
            self.evictions += 1
        self._free = 0
        self.num_free_blocks -= n
        return True

    def free(self, n: int) -> None:
        """Return ``n`` private blocks."""
        self._free += n
        self.num_free_blocks += n

    def match_prefix(self, hashes: Sequence[int], max_blocks: int) -> int:
        """How many leading ``hashes`` (at most ``max_blocks``) are cached."""
        count = 0
        ref, evictable = self._ref, self._evictable
        for h in hashes:
            if count >= max_blocks or (h not in ref and h not in evictable):
                break
            count += 1
        return count

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on cached blocks (found by :meth:`match_prefix`)."""
        ref = self._ref
        for h in hashes:
            if h in ref:
                ref[h] += 1
            else:
                del self._evictable[h]
                ref[h] = 1
                self.num_free_blocks -= 1

    def release(self, hashes: Sequence[int]) -> None:
        """Drop references; blocks nobody owns become evictable (most recently used last)."""
        ref = self._ref
        for h in hashes:
            count = ref[h] - 1
            if count:
                ref[h] = count
            else:
                del ref[h]
                self._evictable[h] = None
                self.num_free_blocks += 1

    def register(self, block_hash: int) -> bool:
        """Turn one of the caller's private blocks into a cached block named ``block_hash``.

        False (and nothing changes) when that hash is already cached: the caller keeps its
        block private, a duplicate that is freed normally.
        """
        if block_hash in self._ref or block_hash in self._evictable:
            return False
        self._ref[block_hash] = 1
        return True
