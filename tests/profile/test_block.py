"""The profile block read from a preset, the KV estimate, the architecture, the preset
file and the document's shape."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest

from tandem.api.spec import PoolProfile
from tandem.engine.model import get_model
from tandem.engine.model.cost_preset import cost_preset_from_mapping
from tandem.profile.architecture import model_spec_from_file, model_spec_from_hf_config
from tandem.profile.block import burst_s, compute_profile, estimate_kv_capacity
from tandem.profile.document import Modelled, Targets, build_document, format_summary
from tandem.profile.fit import build_preset, fit_cost, predict_point
from tests.profile.factories import TINY, limits_of, make_preset, measure, sweep_of

TINY_CONFIG = {
    "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 512,
    "max_position_embeddings": 4096, "dtype": "float32", "tie_word_embeddings": False,
}  # fmt: skip


def _profile(**kw: Any) -> Any:
    defaults: dict[str, Any] = {"ttft_s": 1.0, "itl_s": 0.05, "prompt_tokens": 1000,
                                "output_tokens": 200}  # fmt: skip
    return compute_profile(make_preset(), **{**defaults, **kw})


def test_the_burst_read_is_the_largest_within_the_ttft_target() -> None:
    preset = make_preset()
    block = _profile()
    assert (
        burst_s(preset, 1000, block.burst_prompts)
        <= 1.0
        < burst_s(preset, 1000, block.burst_prompts + 1)
    )
    assert block.prefill_tokens_per_s == pytest.approx(
        block.burst_prompts * 1000 / burst_s(preset, 1000, block.burst_prompts)
    )


def test_prefill_rate_grows_with_the_target_up_to_the_saturated_rate() -> None:
    """Bigger bursts fill the token budget better (a large per-iteration cost makes it
    show); past a few budgets the rate stays where full budgets put it."""
    preset = make_preset(fixed_s=0.05)
    rates = [
        compute_profile(
            preset, ttft_s=t, itl_s=0.05, prompt_tokens=1000, output_tokens=200
        ).prefill_tokens_per_s
        for t in (0.4, 0.8, 3.0, 12.0)
    ]
    assert all(b >= a * 0.97 for a, b in itertools.pairwise(rates)), rates
    assert rates[1] > rates[0] * 1.05, "a burst of two beats one prompt alone"
    assert rates[-1] == pytest.approx(rates[-2], rel=0.05)


def test_a_target_one_prompt_misses_gives_its_own_rate_and_says_so() -> None:
    block = _profile(ttft_s=0.001)
    assert block.burst_prompts == 1
    assert block.notes and "over the TTFT target" in block.notes[0]


def test_the_decode_batch_is_the_largest_within_the_itl_target() -> None:
    preset = make_preset()
    cost = preset.cost_model()
    block = _profile(itl_s=0.03)
    context = 1000 + 100
    assert cost.decode_step_s(block.max_batch_at_itl, context) <= 0.03
    assert cost.decode_step_s(block.max_batch_at_itl + 1, context) > 0.03
    batches = [_profile(itl_s=t).max_batch_at_itl for t in (0.025, 0.03, 0.04, 1.0)]
    # with no ITL to speak of, the KV cache bounds the batch (64 sequences would not fit)
    assert batches == sorted(batches)
    assert batches[-1] == min(preset.max_num_seqs, preset.kv_token_capacity // context) == 59


def test_the_block_is_what_the_inference_service_takes() -> None:
    block = _profile()
    assert PoolProfile.model_validate(block.to_mapping()).kv_token_capacity == 4096 * 16


def test_the_kv_estimate_uses_the_fullest_reading() -> None:
    assert estimate_kv_capacity([(0.02, 2_000.0), (0.10, 10_100.0), (0.0, 5.0)]) == 101_000
    assert estimate_kv_capacity([(0.0, 100.0), (0.5, 0.0)]) is None


def test_the_tiny_models_config_json_gives_its_shape() -> None:
    spec = model_spec_from_hf_config(TINY_CONFIG, "tiny-llama")
    assert spec == TINY
    assert model_spec_from_file(TINY_CONFIG, "tiny-llama") == TINY
    assert model_spec_from_file(json.loads(json.dumps(TINY.__dict__)), "x") == TINY


def test_a_config_without_the_shape_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="num_attention_heads"):
        model_spec_from_hf_config({"hidden_size": 8, "num_hidden_layers": 2,
                                   "vocab_size": 10}, "x")  # fmt: skip


def test_a_preset_survives_its_mapping_and_a_profile_document_holds_one() -> None:
    preset = make_preset(model=TINY, block_size=128)
    again = cost_preset_from_mapping(json.loads(json.dumps(preset.to_mapping())))
    assert again == preset
    assert cost_preset_from_mapping({"preset": preset.to_mapping()}) == preset
    measured = dataclasses.replace(preset, frontend_latency_s=0.0062)
    mapping = json.loads(json.dumps(measured.to_mapping()))
    assert mapping["frontend"] == {"latency_s": 0.0062}
    assert cost_preset_from_mapping(mapping) == measured
    assert "frontend" not in preset.to_mapping(), "no front end measured: none written"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["engine"].pop("block_size"), r"preset.engine: .*missing \['block_size'\]"),
        (lambda m: m["engine"].update(max_num_seqs=0), r"preset.engine.max_num_seqs: 0"),
        (lambda m: m["calibration"].update(memory_efficiency=2.0), r"preset.calibration"),
        (lambda m: m["gpu"].update(peak_flops=0), r"preset.gpu.peak_flops: must be > 0"),
        (lambda m: m["model"].update(num_layers=0), r"preset.model: .*num_layers"),
        (lambda m: m.update(speed=3), r"unknown field\(s\) \['speed'\]"),
        (lambda m: m["engine"].update(num_gpu_blocks=1), r"preset.engine: max_model_len"),
        (lambda m: m.update(frontend={"latency_s": -1}), r"preset.frontend.latency_s: -1 "),
        (lambda m: m.update(frontend={"latency": 1}), r"preset.frontend: unknown .*'latency'"),
        (lambda m: m.update(frontend=0.01), r"preset.frontend: expected a mapping"),
    ],
)
def test_a_bad_preset_is_refused_naming_the_field(edit: Any, message: str) -> None:
    mapping = json.loads(json.dumps(make_preset().to_mapping()))
    edit(mapping)
    with pytest.raises(ValueError, match=message):
        cost_preset_from_mapping(mapping)


def _fitted_document() -> tuple[dict[str, Any], Targets]:
    """The document of a sweep of the known preset, fitted, with the default targets."""
    true = make_preset()
    results = measure(true, sweep_of(true))
    preset = build_preset(true.model, limits_of(true), fit_cost(true.model, limits_of(true),
                                                                results))  # fmt: skip
    modelled = [Modelled(*predict_point(preset, r.spec)) for r in results]
    targets = Targets(1.0, 0.05, "defaults", 1000, 200)
    return build_document(_profile(), preset, results, modelled, targets), targets


def test_the_document_has_exactly_the_contract_keys() -> None:
    doc, targets = _fitted_document()
    assert set(doc) == {"profile", "preset", "points"}
    assert set(doc["profile"]) == {"prefillTokensPerS", "kvTokenCapacity", "maxBatchAtItl"}
    assert cost_preset_from_mapping(doc) == cost_preset_from_mapping(doc["preset"])
    assert {p["kind"] for p in doc["points"]} == {"prefill", "decode"}
    assert set(doc["points"][0]) == {
        "kind", "prompt_tokens", "output_tokens", "concurrency", "requests", "ttft_p50_s",
        "ttft_p90_s", "itl_p50_s", "itl_p90_s", "engine_ttft_s", "engine_itl_s",
        "modelled_ttft_s", "modelled_itl_s",
    }  # fmt: skip
    json.dumps(doc, allow_nan=False)
    text = format_summary(doc, targets, "x", pd=True)
    assert f"profile: {{prefillTokensPerS: {doc['profile']['prefillTokensPerS']}}}" in text
    assert "spec.decode" in text and "(defaults)" in text


def test_the_summary_says_where_the_clients_fell_behind_the_engine() -> None:
    """vLLM's CPU build on two cores: waves of short prompts whose clients got their first
    token half a second after the engine made it. The summary names those points; with
    --decode (the clients' TTFT holds the prefill leg too) it says nothing."""
    doc, targets = _fitted_document()
    assert "fell behind" not in format_summary(doc, targets, "x", pd=False)
    late = next(p for p in doc["points"] if p["kind"] == "decode")
    late["engine_ttft_s"], late["ttft_p50_s"] = 0.0055, 0.5378
    text = format_summary(doc, targets, "x", pd=False)
    where = f"decode {late['prompt_tokens']}+{late['output_tokens']} x{late['concurrency']}"
    assert f"note: at 1 point(s) ({where}) the clients' TTFT p50 was far above" in text
    assert "(up to 537.8 against 5.5 ms)" in text
    assert "fell behind" not in format_summary(doc, targets, "x", pd=True)


def test_the_llama_preset_reads_as_a_profile_an_h100_would_give() -> None:
    """Sanity of the whole chain on a known engine: the 8B model on the calibrated H100."""
    from tandem.engine.model import CostModel, get_gpu
    from tandem.engine.model.cost_preset import CostPreset

    cost = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))
    preset = CostPreset(cost.model, cost.gpu, cost.calib, 20000, 16, 256, 8192, 8192)
    block = compute_profile(preset, ttft_s=1.0, itl_s=0.05, prompt_tokens=1000,
                            output_tokens=200)  # fmt: skip
    assert 15_000 < block.prefill_tokens_per_s < 40_000  # docs: ~28.6k alone, 33k batched
    assert 64 <= block.max_batch_at_itl <= 256
