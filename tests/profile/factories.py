"""Known engines for the profile tests: presets whose every term shows in the sweep, and
the measurements they would give (exact, or with noise)."""

from __future__ import annotations

import random

from tandem.engine.model import Calibration, GpuSpec, ModelSpec, get_model
from tandem.engine.model.cost_preset import CostPreset
from tandem.profile.fit import EngineLimits, predict_point
from tandem.profile.plan import PointSpec, SweepLimits, build_sweep
from tandem.profile.points import PointResult, RequestTiming

#: The tiny test model's shape (``tandem.engine.tinymodel``), as the CPU engine serves it.
TINY = ModelSpec(
    name="tiny-llama", num_params=1_441_792.0, num_layers=2, hidden_size=256, num_heads=4,
    num_kv_heads=2, head_dim=64, vocab_size=512, max_model_len=4096, dtype="float32",
)  # fmt: skip


def make_preset(
    *,
    model: ModelSpec | None = None,
    peak_flops: float = 50e12,
    hbm_bytes_per_s: float = 1e12,
    fixed_s: float = 4e-3,
    per_seq_s: float = 0.2e-3,
    num_gpu_blocks: int = 4096,
    block_size: int = 16,
    max_num_seqs: int = 64,
    max_num_batched_tokens: int = 2048,
    max_model_len: int = 4096,
) -> CostPreset:
    """A measured-style preset (efficiency 1.0, rates as the device). The default is a
    Llama-3.1-8B on a slow device: prefills of a few hundred tokens and up are
    compute-bound, decode steps memory-bound, overheads a third of a step; every term
    shows in the sweep."""
    spec = model or get_model("llama-3.1-8b")
    layers = spec.num_layers
    return CostPreset(
        model=spec,
        gpu=GpuSpec("known", peak_flops, hbm_bytes_per_s, 80 * 2**30, "h100"),
        calibration=Calibration(1.0, 1.0, fixed_s / layers, per_seq_s / layers),
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
    )


def limits_of(preset: CostPreset) -> EngineLimits:
    return EngineLimits(preset.num_gpu_blocks, preset.block_size, preset.max_num_seqs,
                        preset.max_num_batched_tokens, preset.max_model_len)  # fmt: skip


def sweep_of(preset: CostPreset, quick: bool = True) -> list[PointSpec]:
    return build_sweep(
        SweepLimits(preset.max_model_len, preset.max_num_seqs, preset.max_num_batched_tokens),
        quick=quick,
    )


def measure(
    preset: CostPreset,
    points: list[PointSpec],
    *,
    request_s: float = 0.0,
    noise: float = 0.0,
    seed: int = 0,
) -> list[PointResult]:
    """What a client of an engine running ``preset`` would measure: the engine model's
    times, ``request_s`` more before each first token, each request's times scaled by
    ``1 + U(-noise, noise)``."""
    rng = random.Random(seed)
    results = []
    for point in points:
        ttft_s, itl_s = predict_point(preset, point)
        tokens = min(point.output_tokens, preset.max_model_len - point.prompt_tokens)
        timings = []
        for _ in range(point.requests):
            a, b = (1 + rng.uniform(-noise, noise) for _ in range(2))
            first = (ttft_s + request_s) * a
            last = first + (itl_s or 0.0) * (tokens - 1) * b
            timings.append(RequestTiming(point.prompt_tokens, tokens, first, last))
        results.append(PointResult(point, tuple(timings)))
    return results
