"""Scheduler and cache settings of one engine, with vLLM's defaults. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tandem.engine.model.presets import GIB, GpuSpec

SchedulingPolicy = Literal["fcfs", "priority"]
Batching = Literal["continuous", "static"]
Prioritize = Literal["decode", "prefill"]
KVTransferMode = Literal["timed", "external"]
KVLoadFailurePolicy = Literal["fail", "recompute"]


@dataclass(frozen=True)
class EngineConfig:
    """How one engine schedules and caches. Field names follow ``vllm serve`` flags."""

    num_gpu_blocks: int
    """KV-cache blocks of ``block_size`` tokens (see ``CostModel.num_gpu_blocks``)."""
    max_num_seqs: int = 256
    """Most sequences in one iteration (``--max-num-seqs``)."""
    max_num_batched_tokens: int = 8192
    """Token budget of one iteration, decode tokens plus prompt chunks."""
    max_model_len: int = 131072
    """Longest prompt + output, tokens."""
    block_size: int = 16
    """Tokens per KV block (vLLM's default on CUDA)."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    """``fcfs``: arrival order; ``priority``: lower ``priority`` first, ties by arrival, and
    the running request with the highest value (latest arrival on ties) is preempted first."""
    batching: Batching = "continuous"
    """``continuous``: requests join and leave between iterations; ``static``: a batch runs
    to completion (padded to its longest prompt) before the next is formed."""
    prioritize: Prioritize = "decode"
    """Continuous batching only. ``decode``: running sequences take the budget first, new
    prompts get what is left (vLLM V1); ``prefill``: prompts take the budget first and
    decodes run only with what is left, so a long prefill stalls running requests."""
    enable_chunked_prefill: bool = True
    """Split prompts longer than the remaining budget across iterations."""
    long_prefill_token_threshold: int = 0
    """Chunked prefill: the most prompt tokens one request computes in an iteration while
    other requests are running or waiting (``--long-prefill-token-threshold``), so a long
    prompt does not take the whole budget from the short ones queued behind it; alone, it
    takes the whole budget. 0: no cap (vLLM's default)."""
    enable_prefix_caching: bool = True
    """Reuse full KV blocks whose hash chain matches (requests must carry block hashes)."""
    kv_lease_s: float = 30.0
    """Prefill role: how long finished requests' blocks wait to be pulled, seconds."""
    kv_link_bytes_per_s: float = 50e9
    """Decode role: KV transfer bandwidth from the prefill engine, bytes/s."""
    kv_transfer_mode: KVTransferMode = "timed"
    """``timed``: a transfer completes ``transfer_s`` after it starts (fleet simulator);
    ``external``: the driver reports completion with ``Engine.complete_kv_transfer``."""
    kv_load_failure_policy: KVLoadFailurePolicy = "fail"
    """A failed KV load ends the request with ``error`` or re-runs its prefill locally."""
    steady_decode: bool = False
    """Keep decoding sequences implicit (:mod:`tandem.engine.model.steady`): the same
    iterations, at O(1) per iteration instead of O(batch), but results list only the
    other sequences in ``emitted`` (steady ones are counted in ``num_steady``). For
    drivers that need token counts and gaps, not each token's request: the fleet
    simulator. Off for a server streaming every token. Continuous batching only."""

    def __post_init__(self) -> None:
        positive = ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "block_size")
        for name in (*positive, "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "without chunked prefill, max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len ({self.max_model_len})"
            )
        if self.num_gpu_blocks * self.block_size < self.max_model_len:
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the KV cache "
                f"({self.num_gpu_blocks} blocks x {self.block_size} tokens): one sequence "
                "could never fit; lower max_model_len or add blocks (vLLM refuses to start too)"
            )
        threshold = self.long_prefill_token_threshold
        if threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be >= 0, got {threshold}")
        if threshold > self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold ({threshold}) cannot be greater than "
                f"max_model_len ({self.max_model_len})"
            )
        if self.kv_lease_s <= 0 or self.kv_link_bytes_per_s <= 0:
            raise ValueError("kv_lease_s and kv_link_bytes_per_s must be > 0")


def default_scheduler_limits(gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's API-server defaults (max_num_seqs, max_num_batched_tokens) for a GPU.

    256/2048 on small GPUs and A100s, 1024/8192 on >= 70 GiB others, 1024/16384 on >= 160 GiB.
    """
    if gpu.memory_bytes >= 160 * GIB:
        return 1024, 16384
    if gpu.memory_bytes >= 70 * GIB and gpu.calibration_family != "a100":
        return 1024, 8192
    return 256, 2048
