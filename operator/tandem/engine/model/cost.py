"""Iteration time from a roofline of the GPU and the model's architecture. Pure.

One forward pass over a batch costs::

    t = layers x (overhead_per_layer + seq_overhead_per_layer x seqs)
        + max(FLOPs / (tp x peak x compute_eff), bytes / (tp x HBM x memory_eff))

FLOPs are 2 x matmul parameters per computed token, 2 x LM-head parameters per sampled
token, and 4 x layers x heads x head_dim per (query, key) pair of attention. Bytes are all
weights once plus the KV cache read and written. The efficiency factors and overheads are
measured (``calibration.py``), not guessed. Worked example, Llama-3.1-8B on one H100 with
the H100 calibration (compute 0.49, memory 0.85, 160.6 us + 4.98 us/seq per layer), one
decode step of 64 sequences at 1,000 tokens of context::

    bytes = 16.1e9 weights + 131,072 x 64,064 KV = 24.5e9 -> 24.5e9 / (3.35e12 x 0.85) = 8.6 ms
    FLOPs = 2 x 7.0e9 x 64 + ...                 = 1.0e12 -> 1.0e12 / (989e12 x 0.49) = 2.1 ms
    t     = 32 x (0.1606 ms + 0.00498 ms x 64) + max(2.1, 8.6) ms            = 23.9 ms
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from tandem.engine.model.calibration import Calibration, lookup_calibration
from tandem.engine.model.presets import GpuSpec, ModelSpec

#: (compute tokens, attention pairs, sequences, KV read tokens, sampled) -> seconds
IterationTime = Callable[[int, float, int, int, int], float]


@dataclass(frozen=True)
class CostModel:
    """Iteration and transfer times for one engine (a model on ``tp`` GPUs of one kind)."""

    model: ModelSpec
    gpu: GpuSpec
    tensor_parallel: int = 1
    calibration: Calibration | None = None
    """Efficiency factors; ``None`` looks up the measured ones for the GPU family and TP."""

    def __post_init__(self) -> None:
        if self.tensor_parallel < 1:
            raise ValueError("tensor_parallel must be >= 1")
        if self.calibration is None:
            calib = lookup_calibration(self.gpu.calibration_family, self.tensor_parallel)
            object.__setattr__(self, "calibration", calib)

    @property
    def calib(self) -> Calibration:
        assert self.calibration is not None
        return self.calibration

    def iteration_s(
        self,
        compute_tokens: int,
        attn_pairs: float,
        num_seqs: int,
        kv_read_tokens: int,
        num_sampled: int,
    ) -> float:
        """Seconds for one forward pass.

        ``compute_tokens``: tokens whose KV is computed (prompt chunks plus one per decode);
        ``attn_pairs``: (query, key) pairs attended; ``num_seqs``: sequences in the batch;
        ``kv_read_tokens``: cached tokens read by attention; ``num_sampled``: sequences that
        sample a token this iteration.
        """
        return self.iteration_fn(compute_tokens, attn_pairs, num_seqs, kv_read_tokens, num_sampled)

    @cached_property
    def iteration_fn(self) -> IterationTime:
        """:meth:`iteration_s` as a plain function with the model's constants folded in:
        what the engine's hot loop calls (no attribute lookups per iteration)."""
        m, c, gpu, tp = self.model, self.calib, self.gpu, self.tensor_parallel
        k_tokens = 2.0 * m.matmul_params
        k_sampled = 2.0 * m.lm_head_params
        k_pairs = m.attn_flops_per_pair
        weights = m.weight_bytes
        kv_bytes = m.kv_bytes_per_token
        flops_s = tp * gpu.peak_flops * c.compute_efficiency
        bytes_s = tp * gpu.hbm_bytes_per_s * c.memory_efficiency
        layers, per_layer, per_seq = (
            m.num_layers,
            c.overhead_s_per_layer,
            c.seq_overhead_s_per_layer,
        )

        def iteration_s(tokens: int, pairs: float, seqs: int, kv_read: int, sampled: int) -> float:
            compute_s = (k_tokens * tokens + k_sampled * sampled + k_pairs * pairs) / flops_s
            memory_s = (weights + kv_bytes * (kv_read + tokens)) / bytes_s
            overhead_s = layers * (per_layer + per_seq * seqs)
            return overhead_s + (compute_s if compute_s > memory_s else memory_s)

        return iteration_s

    def prefill_s(self, prompt_tokens: int, batch_size: int = 1) -> float:
        """Seconds to prefill ``batch_size`` prompts of ``prompt_tokens`` in one pass."""
        pairs = batch_size * prompt_tokens * (prompt_tokens + 1) / 2.0
        return self.iteration_s(prompt_tokens * batch_size, pairs, batch_size, 0, batch_size)

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """Seconds for one decode step of ``batch_size`` sequences of ``context_tokens`` each."""
        kv = batch_size * context_tokens
        return self.iteration_s(batch_size, float(kv + batch_size), batch_size, kv, batch_size)

    def kv_transfer_s(self, num_tokens: int, link_bytes_per_s: float) -> float:
        """Seconds to move ``num_tokens`` of KV cache over a link of ``link_bytes_per_s``.

        Llama-3.1-8B, 1,000 tokens over 50 GB/s: 131 MB / 50e9 = 2.6 ms.
        """
        return num_tokens * self.model.kv_bytes_per_token / link_bytes_per_s

    def num_gpu_blocks(
        self, block_size: int, gpu_memory_utilization: float, activation_reserve: float = 0.05
    ) -> int:
        """KV blocks that fit per engine, the way vLLM sizes its cache.

        Memory per GPU x utilization, less the weight shard and an activation reserve
        (a fraction of device memory), divided by the per-GPU share of a block's bytes.
        """
        tp = self.tensor_parallel
        free = self.gpu.memory_bytes * (gpu_memory_utilization - activation_reserve)
        free -= self.model.weight_bytes / tp
        block_bytes = self.model.kv_bytes_per_token * block_size / tp
        return max(0, int(free // block_bytes))
