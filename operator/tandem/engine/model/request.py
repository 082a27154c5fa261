"""What goes into the engine and what comes out: requests, results, statistics. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True, slots=True)
class RemoteKV:
    """Decode role: the prompt's KV cache lives on a prefill engine and must be pulled."""

    num_tokens: int
    """Tokens of KV to pull (the prompt)."""
    transfer_s: float | None = None
    """Transfer time, seconds; ``None`` uses KV bytes / ``EngineConfig.kv_link_bytes_per_s``."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as the engine sees it: token counts, no text."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    """Output cap; clamped to ``max_model_len - prompt_tokens``."""
    priority: int = 0
    """Lower runs first under the ``priority`` policy."""
    stop_after_tokens: int | None = None
    """The model emits end-of-sequence after this many output tokens (finish ``stop``)."""
    block_hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full blocks, for prefix caching."""
    hold_kv_for_remote: bool = False
    """Prefill role: keep the KV blocks after finishing until pulled or the lease expires."""
    remote_kv: RemoteKV | None = None
    """Decode role: wait for this KV transfer before decoding."""


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request that left the engine, with its timeline (seconds on the driver's clock)."""

    request_id: str
    finish_reason: FinishReason
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache at first scheduling."""
    max_tokens: int
    arrival_s: float
    first_scheduled_s: float | None
    first_token_s: float | None
    finished_s: float
    num_preemptions: int
    kv_held: bool
    """True when the blocks stay reserved for a remote decode (prefill role)."""
    num_kv_blocks: int
    """Blocks the request held when it finished."""

    @property
    def queue_s(self) -> float:
        start = self.first_scheduled_s if self.first_scheduled_s is not None else self.finished_s
        return max(0.0, start - self.arrival_s)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.arrival_s

    @property
    def prefill_s(self) -> float:
        if self.first_token_s is None or self.first_scheduled_s is None:
            return 0.0
        return self.first_token_s - self.first_scheduled_s

    @property
    def decode_s(self) -> float:
        return 0.0 if self.first_token_s is None else self.finished_s - self.first_token_s

    @property
    def inference_s(self) -> float:
        if self.first_scheduled_s is None:
            return 0.0
        return self.finished_s - self.first_scheduled_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first, seconds."""
        if self.output_tokens < 2:
            return None
        return self.decode_s / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class KVTransferStart:
    """Decode role: blocks were allocated and the pull of a request's KV begins."""

    request_id: str
    num_tokens: int
    transfer_s: float


class IterationResult(NamedTuple):
    """One forward pass: what ran, how long it takes, what it produced.

    State changes are applied when ``Engine.step`` returns; tokens count as emitted at
    ``end_s``. An idle result (``num_seqs == 0``) takes no time. A named tuple rather than
    a frozen dataclass: one is built per iteration, millions per simulated hour, and
    tuples are several times cheaper to construct.
    """

    start_s: float
    duration_s: float
    num_seqs: int
    num_prefill_tokens: int
    """Prompt tokens computed (chunks and recomputation)."""
    num_decode_tokens: int
    emitted: tuple[str, ...]
    """Request ids that received one new token each, steady sequences left out (with
    ``EngineConfig.steady_decode`` off, every one)."""
    num_steady: int
    """Tokens to steady sequences, not listed in ``emitted``."""
    first_tokens: tuple[str, ...]
    """Request ids whose first token this is (a subset of ``emitted``)."""
    finished: tuple[FinishedRequest, ...]
    preempted: tuple[str, ...]
    kv_transfers_started: tuple[KVTransferStart, ...]
    kv_expired: tuple[str, ...]
    """Prefill role: held requests whose lease ran out and whose blocks were freed."""
    continuing: int
    """Tokens to requests that also got one in the previous iteration: each waited
    exactly ``gap_s``."""
    gap_s: float
    """``end_s`` minus the previous non-idle iteration's end, seconds."""
    other_gaps_s: tuple[float, ...]
    """Gaps of tokens to requests back after sitting out (preempted, starved), sorted."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def idle(self) -> bool:
        return self.num_seqs == 0


@dataclass(frozen=True, slots=True)
class HeldKV:
    """Prefill role: a finished request's blocks waiting to be pulled."""

    request_id: str
    num_tokens: int
    num_blocks: int
    expiry_s: float


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of gauges and counters (the numbers vLLM exports)."""

    num_running: int
    num_waiting: int
    """Includes requests waiting for a KV transfer (vLLM counts them as waiting)."""
    num_waiting_for_kv: int
    """Of ``num_waiting``: decode requests whose KV is being or yet to be transferred."""
    num_waiting_for_capacity: int
    """Of ``num_waiting``: requests the scheduler has no room for yet, that is all but the
    decode requests whose KV transfer is in flight (vLLM's
    ``num_requests_waiting_by_reason{reason="capacity"}``; the rest are ``deferred``)."""
    num_kv_transferring: int
    num_kv_held: int
    kv_usage: float
    """Blocks held by requests / all blocks, 0-1 (``vllm:kv_cache_usage_perc``)."""
    kv_blocks_used: int
    kv_blocks_total: int
    kv_tokens_stored: int
    """Tokens whose KV is held by running, transferring and held requests."""
    kv_fragmentation: float
    """1 - tokens stored / (blocks held by those requests x block size), 0-1."""
    prompt_tokens_total: int
    prompt_tokens_local_compute_total: int
    prompt_tokens_cache_hit_total: int
    prompt_tokens_external_total: int
    generation_tokens_total: int
    preemptions_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int
    iterations_total: int
    busy_s_total: float
    kv_expired_total: int
    kv_load_failures_total: int
    finished_by_reason: dict[str, int]
