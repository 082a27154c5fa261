"""What ``tandem profile`` writes: the JSON document and the summary it prints. Pure.

The document is a contract other tools read::

    {"profile": {"prefillTokensPerS": ..., "kvTokenCapacity": ..., "maxBatchAtItl": ...},
     "preset": {cost-model preset, see tandem.engine.model.cost_preset},
     "points": [{"kind", "prompt_tokens", "output_tokens", "concurrency", "requests",
                 "ttft_p50_s", "ttft_p90_s", "itl_p50_s", "itl_p90_s",
                 "engine_ttft_s", "engine_itl_s",
                 "modelled_ttft_s", "modelled_itl_s"}, ...]}

``profile`` is the InferenceService's pool block as written (paste it under
``spec.pool.profile``, or ``prefillTokensPerS`` under ``spec.prefill.profile`` and the
other two under ``spec.decode.profile``); ``preset`` is what ``tandem engine sim --preset``
and ``tandem simulate --preset`` read. ``points`` are the measurements beside what the
fitted preset predicts for them: the clients' percentiles (a request's ``itl`` is its mean
gap; ``null`` for one-token requests); ``engine_*``, the engine's own, from its
``/metrics`` histograms (the median over waves of each wave's mean; ``null`` without
them); ``modelled_*``, the fitted preset's means over each wave's requests, the fitted
request overhead added to TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tandem.engine.model.cost_preset import CostPreset
from tandem.profile.block import ProfileBlock
from tandem.profile.points import PointResult


@dataclass(frozen=True)
class Modelled:
    """The fitted preset's prediction for one point (means over its wave), seconds."""

    ttft_s: float
    itl_s: float | None


@dataclass(frozen=True)
class Targets:
    """The latency targets the profile block is read at, and where they came from."""

    ttft_s: float
    itl_s: float
    source: str
    """``defaults``, ``flags`` or the InferenceService file (and which fields)."""
    prompt_tokens: int
    output_tokens: int


def _finite(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def build_point(result: PointResult, modelled: Modelled) -> dict[str, Any]:
    spec = result.spec
    return {
        "kind": spec.kind,
        "prompt_tokens": spec.prompt_tokens,
        "output_tokens": spec.output_tokens,
        "concurrency": spec.concurrency,
        "requests": len(result.requests),
        "ttft_p50_s": _finite(result.ttft_s(50)),
        "ttft_p90_s": _finite(result.ttft_s(90)),
        "itl_p50_s": _finite(result.itl_s(50)),
        "itl_p90_s": _finite(result.itl_s(90)),
        "engine_ttft_s": _finite(result.engine_ttft_s),
        "engine_itl_s": _finite(result.engine_itl_s),
        "modelled_ttft_s": _finite(modelled.ttft_s),
        "modelled_itl_s": _finite(modelled.itl_s),
    }


def build_document(
    block: ProfileBlock,
    preset: CostPreset,
    results: Sequence[PointResult],
    modelled: Sequence[Modelled],
    targets: Targets,
) -> dict[str, Any]:
    """The document; the targets go with the preset's fit record."""
    preset_map = preset.to_mapping()
    preset_map["fit"] = {
        **preset_map.get("fit", {}),
        "targets": {
            "ttft_s": targets.ttft_s,
            "itl_s": targets.itl_s,
            "source": targets.source,
            "prompt_tokens": targets.prompt_tokens,
            "output_tokens": targets.output_tokens,
        },
        "burst_prompts": block.burst_prompts,
        "notes": list(block.notes),
    }
    return {
        "profile": block.to_mapping(),
        "preset": preset_map,
        "points": [build_point(r, m) for r, m in zip(results, modelled, strict=True)],
    }


def _ms(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 1000:.1f}"


#: A point's clients "fell behind" the engine when their TTFT p50 exceeds the engine's own
#: mean TTFT by this many times and by :data:`LAG_MIN_S` at least.
LAG_FACTOR = 3.0
LAG_MIN_S = 0.1


def find_lagging_points(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points whose clients saw their first token far later than the engine itself
    reported (its ``/metrics`` mean): time lost between the engine and its clients (its
    API server, or a machine that held the clients off the CPU), not in the engine.

    >>> ok = {"ttft_p50_s": 0.012, "engine_ttft_s": 0.010}
    >>> late = {"ttft_p50_s": 0.538, "engine_ttft_s": 0.0055}
    >>> find_lagging_points([ok, late, {"ttft_p50_s": 0.5, "engine_ttft_s": None}]) == [late]
    True
    """
    out = []
    for p in points:
        client, engine = p.get("ttft_p50_s"), p.get("engine_ttft_s")
        if client is None or engine is None:
            continue
        if client > engine * LAG_FACTOR and client - engine > LAG_MIN_S:
            out.append(p)
    return out


def format_summary(document: dict[str, Any], targets: Targets, what: str, pd: bool) -> str:
    """The human summary: fit, targets, the block to paste, the points table."""
    fit = document["preset"]["fit"]
    gpu = document["preset"]["gpu"]
    lines = [
        f"{what}: {fit['points']} points fitted, error mean {fit['mean_abs_error_pct']:.1f} %,"
        f" max {fit['max_abs_error_pct']:.1f} %",
        f"  per iteration {fit['fixed_s_per_iteration'] * 1000:.3g} ms + "
        f"{fit['s_per_sequence'] * 1000:.3g} ms per sequence; "
        f"{gpu['peak_flops'] / 1e9:.4g} GFLOP/s, {gpu['hbm_bytes_per_s'] / 1e9:.4g} GB/s achieved",
        f"targets: TTFT {targets.ttft_s:g}s, ITL {targets.itl_s * 1000:g}ms ({targets.source}); "
        f"typical request {targets.prompt_tokens} prompt + {targets.output_tokens} output tokens",
    ]
    frontend = document["preset"].get("frontend", {}).get("latency_s")
    if frontend is not None:
        lines.append(
            f"front end: {frontend * 1000:.3g} ms a request over the engine's own TTFT "
            "(one request at a time; the simulated engine adds it)"
        )
    block = document["profile"]
    if pd:
        lines += [
            "paste under spec.prefill:",
            f"  profile: {{prefillTokensPerS: {block['prefillTokensPerS']}}}",
            "and under spec.decode:",
            f"  profile: {{kvTokenCapacity: {block['kvTokenCapacity']}, "
            f"maxBatchAtItl: {block['maxBatchAtItl']}}}",
        ]
    else:
        lines += [
            "paste under spec.pool (or each of spec.prefill and spec.decode):",
            f"  profile: {{prefillTokensPerS: {block['prefillTokensPerS']}, "
            f"kvTokenCapacity: {block['kvTokenCapacity']}, "
            f"maxBatchAtItl: {block['maxBatchAtItl']}}}",
        ]
    lines += [f"note: {note}" for note in fit.get("notes", [])]
    lines.append(
        f"{'point':<8} {'prompt':>6} {'out':>4} {'batch':>5} | {'TTFT p50':>8} {'p90':>8} "
        f"{'engine':>8} {'model':>8} | {'ITL p50':>8} {'p90':>8} {'engine':>8} {'model':>8}"
        "  (ms; engine: its own mean)"
    )
    for p in document["points"]:
        lines.append(
            f"{p['kind']:<8} {p['prompt_tokens']:>6} {p['output_tokens']:>4} "
            f"{p['concurrency']:>5} | {_ms(p['ttft_p50_s']):>8} {_ms(p['ttft_p90_s']):>8} "
            f"{_ms(p['engine_ttft_s']):>8} {_ms(p['modelled_ttft_s']):>8} | "
            f"{_ms(p['itl_p50_s']):>8} {_ms(p['itl_p90_s']):>8} {_ms(p['engine_itl_s']):>8} "
            f"{_ms(p['modelled_itl_s']):>8}"
        )
    # With --decode the clients' TTFT holds the prefill leg and the KV transfer besides the
    # decode engine's own first token, so the comparison says nothing there.
    lagging = [] if pd else find_lagging_points(document["points"])
    if lagging:
        worst = max(lagging, key=lambda p: p["ttft_p50_s"] - p["engine_ttft_s"])
        where = ", ".join(
            f"{p['kind']} {p['prompt_tokens']}+{p['output_tokens']} x{p['concurrency']}"
            for p in lagging
        )
        lines.append(
            f"note: at {len(lagging)} point(s) ({where}) the clients' TTFT p50 was far above "
            f"the engine's own (up to {_ms(worst['ttft_p50_s'])} against "
            f"{_ms(worst['engine_ttft_s'])} ms): the engine's API server, or the machine, "
            "fell behind its clients there; the fit reads the engine's own times"
        )
    return "\n".join(lines)
