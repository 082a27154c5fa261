"""One ``tandem profile`` run, start to end. Does I/O: HTTP to the engines, reading the
architecture's file, a progress bar on stderr.

::

    engines' /v1/models and /metrics ──▶ limits, KV cache, served model
    architecture (preset, file, or the engine's own config.json)
    warm-up waves, then the sweep ──▶ PointResult per point        (measure)
    fit ──▶ CostPreset; predictions per point; the profile block   (fit, block: pure)
    ──▶ the document and the summary                               (document: pure)
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.engine.model import ModelSpec, get_model
from tandem.profile.architecture import model_spec_from_file
from tandem.profile.block import compute_profile, estimate_kv_capacity
from tandem.profile.document import Modelled, Targets, build_document, format_summary
from tandem.profile.fit import (
    EngineLimits,
    build_preset,
    estimate_frontend_latency,
    fit_cost,
    predict_point,
)
from tandem.profile.measure import (
    EngineInfo,
    KvSamples,
    ProfileError,
    Target,
    fetch_engine_info,
    new_session,
    run_point,
)
from tandem.profile.plan import PointSpec, SweepLimits, build_sweep, build_warmup
from tandem.profile.points import PointResult

#: Block size assumed when the KV capacity is measured rather than reported (vLLM's on GPUs).
MEASURED_BLOCK_SIZE = 16


class SetupError(ValueError):
    """The run cannot start as asked; the message names the flag and what would do."""


@dataclass(frozen=True)
class ProfileRequest:
    """Everything a run needs (the command's flags, resolved)."""

    url: str
    decode_url: str | None
    model: str | None
    quick: bool
    ttft_s: float
    itl_s: float
    targets_source: str
    max_num_seqs: int
    max_num_batched_tokens: int
    prompt_tokens: int | None
    output_tokens: int | None
    max_concurrency: int
    sim_model: str | None = None
    model_config: Path | None = None
    measure_kv: bool = False
    seed: int = 0
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Outcome:
    document: dict[str, Any]
    summary: str
    title: str
    results: tuple[PointResult, ...]
    seconds: float


def resolve_architecture(request: ProfileRequest, info: EngineInfo) -> ModelSpec:
    """The served model's architecture; :class:`SetupError` says how to name it."""
    if request.sim_model:
        try:
            return get_model(request.sim_model)
        except KeyError as err:
            raise SetupError(f"--sim-model: {err.args[0]}") from None
    if request.model_config:
        return _from_file(request.model_config, info.served_name, "--model-config")
    for name in (info.root, info.served_name):
        if name:
            try:
                return get_model(name)
            except KeyError:
                pass
    local = Path(info.root) / "config.json" if info.root and info.root.startswith("/") else None
    if local is not None and local.is_file():
        return _from_file(local, info.served_name, f"the engine's model folder ({local})")
    raise SetupError(
        f"no architecture for model {info.served_name!r} (root {info.root!r}): pass "
        "--sim-model (llama-3.1-8b, llama-3.1-70b, llama-2-70b) or --model-config FILE "
        "(ModelSpec fields or the model's config.json)"
    )


def _from_file(path: Path, name: str, what: str) -> ModelSpec:
    try:
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("expected a mapping of fields")
        return model_spec_from_file(data, name)
    except (OSError, ValueError) as err:
        raise SetupError(f"{what} {path}: {err}") from None


def _limits(
    request: ProfileRequest, info: EngineInfo, kv_tokens: int | None, max_len: int
) -> EngineLimits:
    """The measured engine's limits; a measured KV capacity wins over the reported one."""
    if kv_tokens is not None:
        block_size = info.block_size or MEASURED_BLOCK_SIZE
        blocks = max(1, kv_tokens // block_size)
    else:
        assert info.num_gpu_blocks and info.block_size
        blocks, block_size = info.num_gpu_blocks, info.block_size
    return EngineLimits(blocks, block_size, request.max_num_seqs,
                        request.max_num_batched_tokens, max_len)  # fmt: skip


async def profile(request: ProfileRequest, *, show_progress: bool = False) -> Outcome:
    """Measure, fit, and build the document (raises :class:`ProfileError` when an engine
    fails, :class:`SetupError` when the run cannot start as asked)."""
    started = time.monotonic()
    target = Target(request.url, request.model or "", request.decode_url, request.timeout_s)
    async with new_session(target) as session:
        info = await fetch_engine_info(session, request.url, request.model)
        kv_info = info
        if request.decode_url:
            kv_info = await fetch_engine_info(session, request.decode_url, info.served_name)
        model = resolve_architecture(request, info)
        max_len = min(info.max_model_len, kv_info.max_model_len)
        target = Target(request.url, info.served_name, request.decode_url, request.timeout_s)
        bounds = SweepLimits(
            max_len, request.max_num_seqs, request.max_num_batched_tokens, request.max_concurrency
        )
        sweep = build_sweep(bounds, quick=request.quick)
        warmup = build_warmup(sweep)
        measure_kv = request.measure_kv or not (kv_info.num_gpu_blocks and kv_info.block_size)
        kv = KvSamples() if measure_kv else None
        results = await _run(session, target, warmup, sweep, request.seed, kv, show_progress)
    kv_tokens = None
    if kv is not None:
        kv_tokens = estimate_kv_capacity(kv.samples)
        if kv_tokens is None:
            raise ProfileError(
                f"{target.kv_url}: no KV capacity: the engine reports no "
                "vllm:cache_config_info and its vllm:kv_cache_usage_perc never moved"
            )
    limits = _limits(request, kv_info, kv_tokens, max_len)
    try:
        fit = fit_cost(model, limits, results)
        preset = build_preset(model, limits, fit)
        preset.engine_config()
        # One engine's front end: with --decode the clients' TTFT holds two engines' (and
        # the KV transfer), which one request at a time cannot tell apart.
        frontend = None if request.decode_url else estimate_frontend_latency(results)
        if frontend is not None:
            preset = dataclasses.replace(preset, frontend_latency_s=round(frontend, 6))
    except ValueError as err:
        raise ProfileError(f"the fit failed: {err}") from None
    modelled = []
    for r in results:
        # What a client sees: the engine model's times and the fitted request overhead.
        ttft_s, itl_s = predict_point(preset, r.spec)
        modelled.append(Modelled(ttft_s + fit.request_s, itl_s))
    prompt = request.prompt_tokens or min(1024, max_len // 2)
    output = request.output_tokens or min(256, max_len // 4)
    block = compute_profile(preset, ttft_s=request.ttft_s, itl_s=request.itl_s,
                            prompt_tokens=prompt, output_tokens=output)  # fmt: skip
    targets = Targets(request.ttft_s, request.itl_s, request.targets_source, prompt, output)
    document = build_document(block, preset, results, modelled, targets)
    if kv is not None:
        document["preset"]["fit"]["kv_tokens_measured"] = kv_tokens
        if kv_info.num_gpu_blocks and kv_info.block_size:
            reported = kv_info.num_gpu_blocks * kv_info.block_size
            document["preset"]["fit"]["kv_tokens_reported"] = reported
    where = request.url + (f" + {request.decode_url}" if request.decode_url else "")
    seconds = time.monotonic() - started
    requests = sum(len(r.requests) for r in results)
    what = f"{info.served_name} at {where}, {requests} requests in {seconds:.0f}s"
    summary = format_summary(document, targets, what, pd=request.decode_url is not None)
    return Outcome(document, summary, f"{info.served_name} at {where}", tuple(results), seconds)


async def _run(
    session: Any,
    target: Target,
    warmup: list[PointSpec],
    sweep: list[PointSpec],
    seed: int,
    kv: KvSamples | None,
    show_progress: bool,
) -> list[PointResult]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    total = sum(p.requests for p in warmup) + sum(p.requests for p in sweep)
    columns = (TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn())
    progress = Progress(*columns, console=Console(stderr=True), disable=not show_progress,
                        transient=True)  # fmt: skip
    results: list[PointResult] = []
    with progress:
        task = progress.add_task("warm-up", total=total)

        def advance() -> None:
            progress.advance(task)

        # Warm-up prompts come from seeds far from the measured ones: never a cache hit.
        for i, spec in enumerate(warmup):
            progress.update(task, description=f"warm-up: {spec.label}")
            await run_point(session, target, spec, seed + 10_000_000 + i * 100_000,
                            on_request=advance)  # fmt: skip
        for i, spec in enumerate(sweep):
            progress.update(task, description=spec.label)
            results.append(await run_point(session, target, spec, seed + i * 100_000,
                                           on_request=advance, kv=kv))  # fmt: skip
    return results
