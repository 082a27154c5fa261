"""The pool ``profile`` block of an InferenceService, from a fitted preset. Pure.

The three fields the autoscaler reads instead of learning them live
(:class:`~tandem.api.spec.PoolProfile`), each for one replica:

* ``prefillTokensPerS`` — prompt tokens per second at the TTFT target: the largest burst
  of typical prompts (``prompt_tokens`` each, arriving together) whose last first token
  comes within the target, over the time it takes. Bigger bursts fill the token budget
  better, so this grows with the target until the engine runs full budgets (its
  saturated rate). When one prompt alone misses the target, its own rate, with a note;
* ``kvTokenCapacity`` — KV-cache tokens (``num_gpu_blocks x block_size``, measured);
* ``maxBatchAtItl`` — the largest decode batch whose step stays within the ITL target at
  the typical context (``prompt_tokens + output_tokens / 2``), within ``max_num_seqs``
  and the KV cache. A steady batch, no prefill mixed in: the autoscaler adds the tail it
  observes live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.engine.model.cost_preset import CostPreset
from tandem.profile.fit import EngineLimits, build_engine, run_wave
from tandem.profile.plan import PointSpec
from tandem.sim.bounds.capacity import decode_batch_at_itl

#: The largest burst the search tries, prompts.
MAX_BURST = 4096


@dataclass(frozen=True)
class ProfileBlock:
    """One replica's measured capacity, as ``spec.<pool>.profile`` takes it."""

    prefill_tokens_per_s: float
    kv_token_capacity: int
    max_batch_at_itl: int
    burst_prompts: int
    """Prompts in the burst ``prefill_tokens_per_s`` was read from."""
    notes: tuple[str, ...] = ()

    def to_mapping(self) -> dict[str, float | int]:
        """The block as the InferenceService spells it."""
        return {
            "prefillTokensPerS": round(self.prefill_tokens_per_s),
            "kvTokenCapacity": self.kv_token_capacity,
            "maxBatchAtItl": self.max_batch_at_itl,
        }


def limits_of(preset: CostPreset) -> EngineLimits:
    return EngineLimits(preset.num_gpu_blocks, preset.block_size, preset.max_num_seqs,
                        preset.max_num_batched_tokens, preset.max_model_len)  # fmt: skip


def burst_s(preset: CostPreset, prompt_tokens: int, prompts: int) -> float:
    """When the last of ``prompts`` prompts arriving together gets its first token, s."""
    engine = build_engine(preset.cost_model(), limits_of(preset))
    times = run_wave(engine, PointSpec("prefill", prompt_tokens, 1, prompts, 1))
    return max(first for first, _ in times)


def compute_prefill_rate(preset: CostPreset, prompt_tokens: int, ttft_s: float
                         ) -> tuple[float, int]:  # fmt: skip
    """(prompt tokens/s, burst size) of the largest burst served within ``ttft_s``."""
    if burst_s(preset, prompt_tokens, 1) > ttft_s:
        return prompt_tokens / burst_s(preset, prompt_tokens, 1), 1
    low, high = 1, 2
    while high <= MAX_BURST and burst_s(preset, prompt_tokens, high) <= ttft_s:
        low, high = high, high * 2
    high = min(high, MAX_BURST + 1)
    while high - low > 1:  # the burst's last TTFT grows with its size: bisect
        mid = (low + high) // 2
        if burst_s(preset, prompt_tokens, mid) <= ttft_s:
            low = mid
        else:
            high = mid
    return low * prompt_tokens / burst_s(preset, prompt_tokens, low), low


def compute_profile(
    preset: CostPreset,
    *,
    ttft_s: float,
    itl_s: float,
    prompt_tokens: int,
    output_tokens: int,
) -> ProfileBlock:
    """The profile block of the engine ``preset`` describes, for these targets and this
    typical request."""
    notes: list[str] = []
    prompt = max(1, min(prompt_tokens, preset.max_model_len - 1))
    rate, burst = compute_prefill_rate(preset, prompt, ttft_s)
    alone_s = burst_s(preset, prompt, 1)
    if alone_s > ttft_s:
        notes.append(
            f"one {prompt}-token prompt alone takes {alone_s:.3g}s, over the TTFT target "
            f"{ttft_s:g}s: prefillTokensPerS is its own rate"
        )
    context = prompt + output_tokens / 2
    cost, config = preset.cost_model(), preset.engine_config()
    batch = decode_batch_at_itl(cost, config, itl_s, context)
    step_s = cost.decode_step_s(1, round(context))
    if batch == 1 and step_s > itl_s:
        notes.append(f"one sequence alone steps in {step_s:.3g}s, over the ITL target {itl_s:g}s")
    return ProfileBlock(rate, preset.kv_token_capacity, batch, burst, tuple(notes))


def estimate_kv_capacity(samples: Sequence[tuple[float, float]]) -> int | None:
    """KV tokens an engine holds, from (usage 0-1, tokens held) pairs read together: the
    pair with the highest usage (the gauge's rounding and the last partial block of each
    sequence matter least there). ``None`` without a usable pair.

    >>> estimate_kv_capacity([(0.01, 900.0), (0.05, 5000.0)])
    100000
    """
    usable = [(u, t) for u, t in samples if 0.0 < u <= 1.0 and t > 0]
    if not usable:
        return None
    usage, tokens = max(usable)
    return round(tokens / usage)
