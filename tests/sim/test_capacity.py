"""Replica capacity from the cost model, and Dynamo's profile measured on it."""

from __future__ import annotations

import pytest

from tandem.engine.model import Engine
from tandem.policy.baselines import PerfProfile
from tandem.sim.bounds.capacity import (
    decode_batch_at_itl,
    decode_token_s,
    decode_tokens_per_s,
    prefill_busy_s,
    prefill_tokens_per_s,
)
from tandem.sim.bounds.profile import EngineProfile

ENGINE = Engine.from_presets("llama-3.1-8b", "h100", 1)
COST, CONFIG = ENGINE.cost, ENGINE.config


def test_prefill_busy_is_at_most_what_the_engine_spends() -> None:
    prompts = [1200] * 40
    bound = prefill_busy_s(COST, CONFIG, sum(prompts), sum(p * (p + 1) / 2 for p in prompts), 40)
    engine = Engine.from_presets("llama-3.1-8b", "h100", 1, enable_prefix_caching=False)
    from tandem.engine.model import EngineRequest

    for i, p in enumerate(prompts):
        engine.add_request(EngineRequest(str(i), p, 1), 0.0)
    now = 0.0
    while engine.has_work:
        now = engine.step(now).end_s
    assert bound <= engine.busy_s_total
    assert bound == pytest.approx(engine.busy_s_total, rel=0.05)


def test_prefill_capacity_of_an_h100_is_tens_of_thousands_of_tokens() -> None:
    assert 25_000 < prefill_tokens_per_s(COST, CONFIG, 1155) < 40_000


def test_decode_batch_within_the_itl_target() -> None:
    batch = decode_batch_at_itl(COST, CONFIG, 0.05, 1300)
    assert COST.decode_step_s(batch, 1300) <= 0.05 < COST.decode_step_s(batch + 1, 1300)
    kv_bound = CONFIG.num_gpu_blocks * CONFIG.block_size // 1300  # 334 sequences fit
    assert decode_batch_at_itl(COST, CONFIG, 10.0, 1300) == min(CONFIG.max_num_seqs, kv_bound)
    assert decode_batch_at_itl(COST, CONFIG, 10.0, 100) == CONFIG.max_num_seqs
    assert decode_batch_at_itl(COST, CONFIG, 1e-6, 1300) == 1
    assert decode_token_s(COST, batch, 1300) < decode_token_s(COST, batch // 2, 1300)
    assert decode_tokens_per_s(COST, CONFIG, 0.05, 1300) == pytest.approx(
        batch / COST.decode_step_s(batch, 1300)
    )


def test_dynamo_profile_follows_its_profiler_definitions() -> None:
    profile: PerfProfile = EngineProfile(COST, CONFIG, COST, CONFIG)
    assert profile.expected_ttft_s(1000) == pytest.approx(COST.prefill_s(1000))
    assert profile.prefill_throughput_per_gpu(1000) == pytest.approx(1000 / COST.prefill_s(1000))
    assert profile.expected_itl_s(64, 1000) == COST.decode_step_s(64, 1000)
    assert profile.decode_throughput_per_gpu(0.05, 1300) == pytest.approx(
        decode_tokens_per_s(COST, CONFIG, 0.05, 1300)
    )
    two = EngineProfile(COST, CONFIG, COST, CONFIG, 2, 2)
    assert two.prefill_throughput_per_gpu(1000) == pytest.approx(
        profile.prefill_throughput_per_gpu(1000) / 2
    )


def test_long_prompts_prefill_in_budget_sized_chunks() -> None:
    profile = EngineProfile(COST, CONFIG, COST, CONFIG)
    one = profile.expected_ttft_s(CONFIG.max_num_batched_tokens)
    two = profile.expected_ttft_s(2 * CONFIG.max_num_batched_tokens)
    assert two > 2 * one  # the second chunk attends to the first
