"""What one replica can do, from the engine model's cost model. Pure.

Used by the oracle (lower bounds on busy time) and by the Dynamo baseline's profile
(what Dynamo's offline profiler would measure). All times in seconds, token counts in
tokens.

* :func:`prefill_busy_s` — the least busy time any schedule needs to prefill a set of
  prompts: at least ``ceil(total / max_num_batched_tokens)`` iterations, each paying
  the per-iteration overhead, plus every FLOP and the per-sequence overhead of every
  prompt once. It is ``cost.iteration_s`` of one iteration holding everything, plus
  the fixed overhead of the other iterations: a lower bound because the cost model's
  ``max(compute, memory)`` of a sum never exceeds the sum of the maxima.
* :func:`decode_batch_at_itl` — the largest decode batch whose iteration stays within
  an ITL target (and fits ``max_num_seqs`` and the KV cache).
* :func:`decode_token_s` — busy seconds per generated token at a batch size; it falls
  as the batch grows (the weights are read once per iteration), so at the largest
  batch within the ITL target it is the least any schedule meeting that target pays.
"""

from __future__ import annotations

from tandem.engine.model import CostModel, EngineConfig


def prefill_busy_s(
    cost: CostModel,
    config: EngineConfig,
    total_tokens: int,
    attn_pairs: float,
    num_prompts: int,
) -> float:
    """Least busy seconds to prefill ``num_prompts`` prompts of ``total_tokens`` in all,
    whose attention covers ``attn_pairs`` (query, key) pairs (``sum p(p+1)/2``).

    Worked example, Llama-3.1-8B on an H100, 8 prompts of 1,024 tokens: one 8,192-token
    iteration, 8192 x 14 GFLOP / (989 TFLOP/s x 0.49) = 0.24 s plus 5 ms of overheads.
    """
    if total_tokens <= 0:
        return 0.0
    budget = config.max_num_batched_tokens
    iterations = -(-total_tokens // budget)
    one = cost.iteration_s(total_tokens, attn_pairs, num_prompts, 0, num_prompts)
    fixed = cost.model.num_layers * cost.calib.overhead_s_per_layer
    return one + (iterations - 1) * fixed


def kv_tokens(config: EngineConfig) -> int:
    """KV-cache tokens of one replica."""
    return config.num_gpu_blocks * config.block_size


def decode_batch_at_itl(
    cost: CostModel, config: EngineConfig, itl_s: float, context_tokens: float
) -> int:
    """Largest batch of sequences of ``context_tokens`` whose decode step is ``<= itl_s``
    and whose KV fits the cache (at least 1: one sequence always runs)."""
    ctx = max(round(context_tokens), 1)
    limit = max(min(config.max_num_seqs, kv_tokens(config) // ctx), 1)
    if cost.decode_step_s(limit, ctx) <= itl_s:
        return limit
    lo, hi = 1, limit
    while lo < hi:  # the step time grows with the batch: bisect
        mid = (lo + hi + 1) // 2
        if cost.decode_step_s(mid, ctx) <= itl_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_token_s(cost: CostModel, batch: int, context_tokens: float) -> float:
    """Busy seconds per generated token in a decode batch of ``batch``."""
    ctx = max(round(context_tokens), 1)
    return cost.decode_step_s(batch, ctx) / batch


def decode_tokens_per_s(
    cost: CostModel, config: EngineConfig, itl_s: float, context_tokens: float
) -> float:
    """Most output tokens/s one replica generates with every step within ``itl_s``."""
    batch = decode_batch_at_itl(cost, config, itl_s, context_tokens)
    return 1.0 / decode_token_s(cost, batch, context_tokens)


def prefill_tokens_per_s(cost: CostModel, config: EngineConfig, prompt_tokens: float) -> float:
    """Prompt tokens/s one replica sustains on full token budgets of such prompts."""
    p = max(round(prompt_tokens), 1)
    per_iter = max(config.max_num_batched_tokens // p, 1)
    tokens = per_iter * p
    busy = prefill_busy_s(cost, config, tokens, per_iter * p * (p + 1) / 2.0, per_iter)
    return tokens / busy
