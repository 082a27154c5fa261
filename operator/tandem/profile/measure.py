"""Driving an engine through the sweep and timing every request. Does I/O: HTTP to the
engines given.

Every request is a streamed ``/v1/completions`` of token ids with ``ignore_eos`` (so it
runs to ``max_tokens``) and ``stream_options.include_usage`` (the engine's own token
count). With a decode engine (``--decode``), a request takes the router's two legs: the
prompt to the prefill engine with ``max_tokens`` 1 and ``kv_transfer_params``
``{do_remote_decode: true}``, then the same body with the returned parameters to the
decode engine, streamed; its TTFT runs from sending the first leg to the decode engine's
first token. Prefill points go to the prefill engine alone.

The engine's limits come from ``/v1/models`` (``max_model_len``) and ``/metrics``
(``vllm:cache_config_info``: ``num_gpu_blocks`` x ``block_size`` is the KV cache). An
engine without that gauge, or ``measure_kv``, has its KV capacity measured instead: during
the decode waves ``vllm:kv_cache_usage_perc`` is read every quarter second beside the
tokens the wave's requests hold (prompt plus tokens received).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tandem.observe.text import ExpositionError, parse_exposition
from tandem.profile.plan import PointSpec, build_prompt
from tandem.profile.points import PointResult, RequestTiming

#: the prefill leg's ``kv_transfer_params``, as vLLM's toy proxy and Tandem's router send them
HANDOFF = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
KV_POLL_S = 0.25


class ProfileError(RuntimeError):
    """The engine answered something a profile cannot use; the message says what."""


@dataclass(frozen=True)
class Target:
    """Where requests go."""

    url: str
    """The engine (aggregated), or the prefill engine with ``decode_url``."""
    model: str
    decode_url: str | None = None
    timeout_s: float = 600.0

    @property
    def kv_url(self) -> str:
        """The engine whose KV cache holds the decoding sequences."""
        return self.decode_url or self.url


@dataclass(frozen=True)
class EngineInfo:
    """What an engine says about itself."""

    served_name: str
    root: str | None
    max_model_len: int
    num_gpu_blocks: int | None
    block_size: int | None


@dataclass
class KvSamples:
    """(KV usage 0-1, tokens the running requests hold) pairs read during decode waves."""

    samples: list[tuple[float, float]] = field(default_factory=list)


def parse_cache_info(text: str) -> tuple[int | None, int | None]:
    """(num_gpu_blocks, block_size) of the first engine in ``vllm:cache_config_info``.

    >>> parse_cache_info('vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0')
    (100, 16)
    """
    families = parse_exposition(text, only=["vllm:cache_config_info"]).by_name()
    for sample in families.get("vllm_cache_config_info", []):
        try:
            return int(sample.labels["num_gpu_blocks"]), int(sample.labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None, None


#: the engine's own latency histograms a point reads before and after (sum and count)
ENGINE_TTFT = "vllm:time_to_first_token_seconds"
ENGINE_ITL = "vllm:inter_token_latency_seconds"


def parse_latency_totals(text: str) -> dict[str, tuple[float, float]]:
    """``{histogram: (sum, count)}`` over the page's engines for TTFT and ITL.

    >>> parse_latency_totals('vllm:inter_token_latency_seconds_sum{engine="0"} 1.5\\n'
    ...                      'vllm:inter_token_latency_seconds_count{engine="0"} 30')
    {'vllm:inter_token_latency_seconds': (1.5, 30.0)}
    """
    names = [f"{h}_{part}" for h in (ENGINE_TTFT, ENGINE_ITL) for part in ("sum", "count")]
    families = parse_exposition(text, only=names).by_name()
    out = {}
    for histogram in (ENGINE_TTFT, ENGINE_ITL):
        key = histogram.replace(":", "_")
        sums = [s.value for s in families.get(key + "_sum", [])]
        counts = [s.value for s in families.get(key + "_count", [])]
        if sums and counts:
            out[histogram] = (sum(sums), sum(counts))
    return out


def engine_mean_s(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], name: str
) -> float | None:
    """The mean of histogram ``name`` over what happened between two readings.

    >>> engine_mean_s({"h": (1.0, 10.0)}, {"h": (4.0, 40.0)}, "h")
    0.1
    """
    if name not in before or name not in after:
        return None
    total, count = after[name][0] - before[name][0], after[name][1] - before[name][1]
    return total / count if count > 0 else None


def parse_kv_usage(text: str) -> float | None:
    """Mean ``vllm:kv_cache_usage_perc`` over the page's engines (0-1), if any."""
    families = parse_exposition(text, only=["vllm:kv_cache_usage_perc"]).by_name()
    values = [s.value for s in families.get("vllm_kv_cache_usage_perc", [])]
    return sum(values) / len(values) if values else None


async def _get(session: aiohttp.ClientSession, url: str) -> str:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ProfileError(f"GET {url}: HTTP {resp.status}: {text[:300]}")
            return text
    except (aiohttp.ClientError, TimeoutError) as err:
        raise ProfileError(f"GET {url}: {err or type(err).__name__}") from None


async def fetch_engine_info(
    session: aiohttp.ClientSession, url: str, model: str | None = None
) -> EngineInfo:
    """The served model (``model``, or the first one listed) and the engine's limits."""
    try:
        listed = json.loads(await _get(session, url + "/v1/models"))["data"]
    except (ValueError, KeyError, TypeError) as err:
        raise ProfileError(f"{url}/v1/models: not an OpenAI model list ({err})") from None
    names = [m.get("id") for m in listed]
    chosen = next((m for m in listed if m.get("id") == model), None) if model else listed[0]
    if chosen is None:
        raise ProfileError(f"{url} serves no model {model!r}; it serves {names}")
    try:
        blocks, block_size = parse_cache_info(await _get(session, url + "/metrics"))
    except ExpositionError as err:
        raise ProfileError(f"{url}/metrics: {err}") from None
    max_len = chosen.get("max_model_len")
    if not isinstance(max_len, int) or max_len < 32:
        raise ProfileError(f"{url}/v1/models: model {chosen.get('id')!r} has no usable "
                           f"max_model_len ({max_len!r})")  # fmt: skip
    return EngineInfo(str(chosen["id"]), chosen.get("root"), max_len, blocks, block_size)


def _body(target: Target, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    return {"model": target.model, "prompt": prompt, "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0.0}  # fmt: skip


async def _post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    async with session.post(url, json=body, headers=headers) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise ProfileError(f"POST {url}: HTTP {resp.status}: {text[:300]}")
        answer: dict[str, Any] = json.loads(text)
        return answer


async def measure_request(
    session: aiohttp.ClientSession,
    target: Target,
    prompt: list[int],
    max_tokens: int,
    request_id: str,
    *,
    through_decode: bool = True,
    progress: Callable[[int], None] | None = None,
) -> RequestTiming:
    """Send one request and time it; ``progress(tokens so far)`` after each chunk.

    ``through_decode``: with a decode engine, take both legs (else the prefill engine
    alone serves it, as a prefill point wants)."""
    headers = {"X-Request-Id": request_id}
    body = _body(target, prompt, max_tokens)
    url = target.url
    started = time.perf_counter()
    try:
        if target.decode_url and through_decode:
            first_leg = {**body, "max_tokens": 1, "kv_transfer_params": HANDOFF}
            answer = await _post_json(session, target.url + "/v1/completions", first_leg, headers)
            params = answer.get("kv_transfer_params")
            if not isinstance(params, dict):
                raise ProfileError(f"{target.url}: the prefill leg returned no "
                                   "kv_transfer_params: is it a kv_producer?")  # fmt: skip
            body = {**body, "kv_transfer_params": params}
            url = target.decode_url
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        first = last = None
        tokens = chunks = 0
        async with session.post(url + "/v1/completions", json=body, headers=headers) as resp:
            if resp.status != 200:
                text = await resp.text()
                raise ProfileError(f"POST {url}/v1/completions: HTTP {resp.status}: {text[:300]}")
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise ProfileError(f"{url}: error in the stream: {chunk['error']}")
                if chunk.get("choices"):
                    now = time.perf_counter() - started
                    first = now if first is None else first
                    last = now
                    chunks += 1
                    if progress is not None:
                        progress(chunks)
                usage = chunk.get("usage")
                if usage:
                    tokens = int(usage.get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError) as err:
        raise ProfileError(f"{url}: {err or type(err).__name__}") from None
    if first is None or last is None:
        raise ProfileError(f"{url}: the stream carried no token")
    return RequestTiming(len(prompt), tokens or chunks, first, last)


async def _poll_kv(
    session: aiohttp.ClientSession, url: str, held: Callable[[], float], out: KvSamples
) -> None:
    while True:
        try:
            usage = parse_kv_usage(await _get(session, url + "/metrics"))
        except (ProfileError, ExpositionError):
            usage = None
        tokens = held()
        if usage and tokens > 0:
            out.samples.append((usage, tokens))
        await asyncio.sleep(KV_POLL_S)


async def run_point(
    session: aiohttp.ClientSession,
    target: Target,
    spec: PointSpec,
    seed: int,
    *,
    on_request: Callable[[], None] | None = None,
    kv: KvSamples | None = None,
) -> PointResult:
    """``spec.repeats`` waves of ``spec.concurrency`` requests sent together; request ``i``
    of the point draws its prompt from ``seed + i``. The engine's latency histograms are
    read before and after each wave (an engine serving others would count theirs too:
    a profile wants the engine to itself)."""
    engine_url = target.kv_url if spec.kind == "decode" else target.url
    timings: list[RequestTiming] = []
    ttfts: list[float] = []
    itls: list[float] = []
    for wave in range(spec.repeats):
        base = seed + wave * spec.concurrency
        before = await _latency_totals(session, engine_url)
        timings += await _run_wave(session, target, spec, base, on_request, kv)
        after = await _latency_totals(session, engine_url)
        for name, out in ((ENGINE_TTFT, ttfts), (ENGINE_ITL, itls)):
            mean = engine_mean_s(before, after, name)
            if mean is not None:
                out.append(mean)
    return PointResult(spec, tuple(timings), tuple(ttfts), tuple(itls))


async def _latency_totals(
    session: aiohttp.ClientSession, url: str
) -> dict[str, tuple[float, float]]:
    """The engine's latency histograms now; nothing when it has none (or no /metrics)."""
    try:
        return parse_latency_totals(await _get(session, url + "/metrics"))
    except (ProfileError, ExpositionError):
        return {}


async def _run_wave(
    session: aiohttp.ClientSession,
    target: Target,
    spec: PointSpec,
    base: int,
    on_request: Callable[[], None] | None,
    kv: KvSamples | None,
) -> list[RequestTiming]:
    held: dict[int, float] = {}

    async def one(i: int) -> RequestTiming:
        def progress(chunks: int) -> None:
            held[i] = spec.prompt_tokens + chunks

        timing = await measure_request(
            session,
            target,
            build_prompt(base + i, spec.prompt_tokens),
            spec.output_tokens,
            f"profile-{base + i}-{time.monotonic_ns()}",
            through_decode=spec.kind == "decode",
            progress=progress,
        )
        held.pop(i, None)
        if on_request is not None:
            on_request()
        return timing

    def holding() -> float:
        """Tokens the wave holds, once every request of it streams (before, some hold
        prompts this side cannot see)."""
        return sum(held.values()) if len(held) == spec.concurrency else 0.0

    poller = None
    if kv is not None and spec.kind == "decode":
        poller = asyncio.create_task(_poll_kv(session, target.kv_url, holding, kv))
    try:
        return list(await asyncio.gather(*(one(i) for i in range(spec.concurrency))))
    finally:
        if poller is not None:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)


def new_session(target: Target) -> aiohttp.ClientSession:
    """A session without a connection cap (waves open hundreds at once) and a connection
    per request: a kept-alive connection the server closed while idle (uvicorn after 5 s)
    would fail the next request on it, and a retry would spoil its timing."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
        timeout=aiohttp.ClientTimeout(total=target.timeout_s),
    )
