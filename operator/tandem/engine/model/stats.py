"""Snapshots of an engine's gauges and counters for metrics. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.engine.model.request import EngineStats
from tandem.engine.model.sequence import TRANSFERRING, Sequence

if TYPE_CHECKING:
    from tandem.engine.model.engine import Engine


def build_stats(engine: Engine, live: list[Sequence], held: list[Sequence]) -> EngineStats:
    """``live``: requests not finished; ``held``: finished ones keeping KV for a remote decode.

    Fragmentation counts the unused slots of blocks held by requests: a request of 17 tokens
    holds 2 blocks of 16, so 15 of its 32 slots are empty.
    """
    sched = engine.scheduler
    kv = sched.kv
    waiting_for_kv = sum(1 for s in live if s.remote is not None)
    stored = blocks = 0
    for seq in live:
        computed, owned = sched.current(seq)
        if owned:
            stored += seq.prompt_tokens if seq.status == TRANSFERRING else computed
            blocks += owned
    for seq in held:
        stored += seq.num_computed
        blocks += seq.num_blocks
    capacity = blocks * engine.config.block_size
    prompt = engine.prompt_tokens_total
    cached = engine.prompt_tokens_cache_hit_total
    external = engine.prompt_tokens_external_total
    return EngineStats(
        num_running=engine.num_running,
        num_waiting=engine.num_waiting,
        num_waiting_for_kv=waiting_for_kv,
        num_waiting_for_capacity=engine.num_waiting_for_capacity,
        num_kv_transferring=len(sched.transferring),
        num_kv_held=len(held),
        kv_usage=kv.usage,
        kv_blocks_used=kv.num_used_blocks,
        kv_blocks_total=kv.num_blocks,
        kv_tokens_stored=stored,
        kv_fragmentation=1.0 - stored / capacity if capacity else 0.0,
        prompt_tokens_total=prompt,
        prompt_tokens_local_compute_total=prompt - cached - external,
        prompt_tokens_cache_hit_total=cached,
        prompt_tokens_external_total=external,
        generation_tokens_total=engine.generation_tokens_total,
        preemptions_total=sched.preemptions,
        prefix_cache_queries_total=sched.prefix_queries,
        prefix_cache_hits_total=sched.prefix_hits,
        iterations_total=engine.iterations_total,
        busy_s_total=engine.busy_s_total,
        kv_expired_total=engine.kv_expired_total,
        kv_load_failures_total=engine.kv_load_failures_total,
        finished_by_reason=dict(engine.finished_by_reason),
    )
