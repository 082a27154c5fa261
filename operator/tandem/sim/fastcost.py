"""The cost model's iteration time with its constants folded, for the hot loop. Pure.

:func:`fast_iteration_s` evaluates the same floating-point operations as
:meth:`tandem.engine.model.CostModel.iteration_s` in the same order, so its results
are bit-identical, without the per-call attribute lookups and property computations
(``kv_bytes_per_token`` and friends). It is used only if it agrees with the cost
model on a spread of arguments; otherwise the cost model's own method is returned, so
a change to the cost model can never make the two disagree silently.
"""

from __future__ import annotations

from collections.abc import Callable

from tandem.engine.model import CostModel

IterationTime = Callable[[int, float, int, int, int], float]


def fast_iteration_s(cost: CostModel) -> IterationTime:
    """``cost.iteration_s`` with folded constants, or ``cost.iteration_s`` itself."""
    m, c, gpu, tp = cost.model, cost.calib, cost.gpu, cost.tensor_parallel
    k_tokens = 2.0 * m.matmul_params
    k_sampled = 2.0 * m.lm_head_params
    k_pairs = m.attn_flops_per_pair
    weights = m.weight_bytes
    kv_bytes = m.kv_bytes_per_token
    flops_s = tp * gpu.peak_flops * c.compute_efficiency
    bytes_s = tp * gpu.hbm_bytes_per_s * c.memory_efficiency
    layers, per_layer, per_seq = m.num_layers, c.overhead_s_per_layer, c.seq_overhead_s_per_layer

    def iteration_s(tokens: int, pairs: float, seqs: int, kv_read: int, sampled: int) -> float:
        compute_s = (k_tokens * tokens + k_sampled * sampled + k_pairs * pairs) / flops_s
        memory_s = (weights + kv_bytes * (kv_read + tokens)) / bytes_s
        overhead_s = layers * (per_layer + per_seq * seqs)
        return overhead_s + (compute_s if compute_s > memory_s else memory_s)

    probes = [(1, 2.0, 1, 1, 1), (8192, 3.3e7, 9, 0, 9), (256, 2.6e5, 256, 256_000, 256)]
    probes += [(n, n * 1e3 + 0.5, max(n // 4, 1), n * 700, n // 3) for n in (3, 77, 1024, 5000)]
    if all(iteration_s(*p) == cost.iteration_s(*p) for p in probes):
        return iteration_s
    return cost.iteration_s
