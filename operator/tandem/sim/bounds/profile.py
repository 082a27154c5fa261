"""The offline profile Dynamo's SLA planner needs, measured on the engine model. Pure.

Dynamo's pre-deployment profiler runs the engine at a few input lengths and batch
sizes and records TTFT of a lone prefill and ITL of decode batches; the planner then
interpolates. Here the engine model's cost model stands in for the GPU, so the
profile is exactly what that profiler would measure on it:

* prefill throughput per GPU at an input length = ``isl / TTFT(isl) / GPUs`` of one
  prompt alone (Dynamo's definition; batching in production only does better);
* decode throughput per GPU = the best ``batch / ITL(batch)`` whose ITL stays within
  the target at that context, within ``max_num_seqs`` and the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.engine.model import CostModel, EngineConfig
from tandem.sim.bounds.capacity import decode_batch_at_itl, decode_token_s


@dataclass(frozen=True)
class EngineProfile:
    """A :class:`tandem.policy.baselines.PerfProfile` measured on the cost model."""

    prefill_cost: CostModel
    prefill_config: EngineConfig
    decode_cost: CostModel
    decode_config: EngineConfig
    gpus_per_prefill_engine: int = 1
    gpus_per_decode_engine: int = 1

    def expected_ttft_s(self, isl_tokens: float) -> float:
        """TTFT of a lone prompt of ``isl_tokens``, seconds (prefill in token budgets)."""
        p = max(round(isl_tokens), 1)
        budget = self.prefill_config.max_num_batched_tokens
        total, done = 0.0, 0
        while done < p:
            n = min(budget, p - done)
            pairs = n * done + n * (n + 1) / 2.0
            total += self.prefill_cost.iteration_s(n, pairs, 1, done, 1 if done + n == p else 0)
            done += n
        return total

    def prefill_throughput_per_gpu(self, isl_tokens: float) -> float:
        """Prompt tokens/s per GPU for prompts of ``isl_tokens``."""
        p = max(isl_tokens, 1.0)
        return p / self.expected_ttft_s(p) / max(self.gpus_per_prefill_engine, 1)

    def expected_itl_s(self, batch: float, context_tokens: float) -> float:
        """ITL of a decode batch of ``batch`` sequences at ``context_tokens``, seconds."""
        b = max(round(batch), 1)
        return self.decode_cost.decode_step_s(b, max(round(context_tokens), 1))

    def decode_throughput_per_gpu(self, itl_s: float, context_tokens: float) -> float:
        """Output tokens/s per GPU at the largest batch within ``itl_s``."""
        batch = decode_batch_at_itl(self.decode_cost, self.decode_config, itl_s, context_tokens)
        per_token = decode_token_s(self.decode_cost, batch, context_tokens)
        return 1.0 / per_token / max(self.gpus_per_decode_engine, 1)
