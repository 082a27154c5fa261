"""Paged KV cache: counting, prefix reuse, eviction."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.engine.model.kvcache import KVCache


def test_allocate_free_and_usage() -> None:
    kv = KVCache(10, 16)
    assert kv.allocate(4) and kv.num_used_blocks == 4 and kv.usage == 0.4
    assert not kv.allocate(7)
    assert kv.num_used_blocks == 4  # a failed allocation takes nothing
    kv.free(4)
    assert kv.num_free_blocks == 10 and kv.usage == 0.0


def test_prefix_blocks_are_shared_then_evictable_then_evicted() -> None:
    kv = KVCache(4, 16)
    assert kv.allocate(2)
    assert kv.register(101) and kv.register(102)  # the caller's 2 blocks become cached
    assert not kv.register(101)  # already cached: the caller keeps a private duplicate
    assert kv.match_prefix([101, 102, 103], max_blocks=8) == 2
    assert kv.match_prefix([101, 102], max_blocks=1) == 1
    kv.acquire([101, 102])  # a second owner
    kv.release([101, 102])
    assert kv.num_used_blocks == 2
    kv.release([101, 102])  # last owner gone: cached but counted free
    assert kv.num_used_blocks == 0 and kv.num_cached_blocks == 2
    assert kv.match_prefix([101], 8) == 1
    kv.acquire([101])  # revived from the evictable pool
    assert kv.num_used_blocks == 1
    kv.release([101])
    assert kv.allocate(4)  # needs both cached blocks: evicts least recently used first
    assert kv.evictions == 2 and kv.match_prefix([102], 8) == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["alloc", "free", "cache", "drop"]), st.integers(1, 6)),
        max_size=60,
    )
)
def test_blocks_are_conserved(ops: list[tuple[str, int]]) -> None:
    kv = KVCache(32, 16)
    private = 0
    owned: list[int] = []
    next_hash = 0
    for op, n in ops:
        if op == "alloc" and kv.allocate(n):
            private += n
        elif op == "free" and private:
            k = min(n, private)
            kv.free(k)
            private -= k
        elif op == "cache" and private:
            next_hash += 1
            if kv.register(next_hash):
                private -= 1
                owned.append(next_hash)
        elif op == "drop" and owned:
            kv.release([owned.pop()])
        assert kv.num_used_blocks == private + len(owned)
        assert 0 <= kv.num_used_blocks <= kv.num_blocks
        assert kv.num_free_blocks + kv.num_used_blocks == kv.num_blocks
