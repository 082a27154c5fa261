"""Engine and router ``/metrics`` pages → frozen per-pod samples. Pure.

A sample is one scrape of one pod: gauges as read, counters as cumulative totals and
histograms as cumulative buckets; :mod:`tandem.observe.compute` turns two samples into
rates and window percentiles. ``at_s`` is when the page was read, on the caller's
clock: parsing takes it as an argument and reads no clock.

Engine pages use vLLM 0.34's names (``vllm:num_requests_waiting``, ...), accepted
with colons or underscores. A pod running several data-parallel ranks has one series
per ``engine`` label: gauges and counters are summed over them, KV usage averaged. With
``model_name`` set, series carrying another ``model_name`` label are ignored.

Router pages carry ``tandem_router_*`` per priority class (label ``class``): latency
histograms, requests by status code, the feasibility accounting (the TTFT queueing ratio
of requests that could meet their target, the infeasible ones by reason) and the
requests a decode engine absorbed.

Only the lines of the metrics read here are parsed (a malformed line elsewhere on the
page goes unnoticed), which keeps a 100 kB page of histograms cheap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tandem.observe.histogram import Histogram, parse_histogram
from tandem.observe.text import Sample, parse_exposition

ENGINE_WAITING = "vllm:num_requests_waiting"
ENGINE_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
ENGINE_REASON_LABEL = "reason"
ENGINE_CAPACITY_REASON = "capacity"
ENGINE_RUNNING = "vllm:num_requests_running"
ENGINE_KV_USAGE = "vllm:kv_cache_usage_perc"
ENGINE_CACHE_INFO = "vllm:cache_config_info"
ENGINE_PROMPT_TOKENS = "vllm:prompt_tokens_total"
ENGINE_GENERATION_TOKENS = "vllm:generation_tokens_total"
ENGINE_PREEMPTIONS = "vllm:num_preemptions_total"
ENGINE_REQUEST_SUCCESS = "vllm:request_success_total"
ENGINE_TTFT = "vllm:time_to_first_token_seconds"
ENGINE_ITL = "vllm:inter_token_latency_seconds"

ROUTER_REQUESTS = "tandem_router_requests_total"
ROUTER_TTFT = "tandem_router_time_to_first_token_seconds"
ROUTER_ITL = "tandem_router_inter_token_latency_seconds"
ROUTER_QUEUEING = "tandem_router_ttft_queueing_ratio"
ROUTER_INFEASIBLE = "tandem_router_requests_infeasible_total"
ROUTER_ABSORBED = "tandem_router_absorbed_requests_total"
ROUTER_ABSORBED_TOKENS = "tandem_router_absorbed_prompt_tokens_total"
ENGINE_METRICS = (
    ENGINE_WAITING,
    ENGINE_WAITING_BY_REASON,
    ENGINE_RUNNING,
    ENGINE_KV_USAGE,
    ENGINE_CACHE_INFO,
    ENGINE_PROMPT_TOKENS,
    ENGINE_GENERATION_TOKENS,
    ENGINE_PREEMPTIONS,
    ENGINE_REQUEST_SUCCESS,
    ENGINE_TTFT,
    ENGINE_ITL,
)
ROUTER_METRICS = (
    ROUTER_REQUESTS,
    ROUTER_TTFT,
    ROUTER_ITL,
    ROUTER_QUEUEING,
    ROUTER_INFEASIBLE,
    ROUTER_ABSORBED,
    ROUTER_ABSORBED_TOKENS,
)
ROUTER_CLASS_LABEL = "class"
ROUTER_CODE_LABEL = "code"
ROUTER_REASON_LABEL = "reason"


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one engine pod; ``None`` where the page lacks the metric."""

    at_s: float
    """When the page was read (seconds, caller's clock)."""
    waiting_requests: float | None = None
    waiting_for_capacity: float | None = None
    """Of ``waiting_requests``: those waiting for room in the batch or the KV cache
    (``num_requests_waiting_by_reason{reason="capacity"}``), not for their KV transfer."""
    running_requests: float | None = None
    kv_usage: float | None = None
    """Mean ``kv_cache_usage_perc`` over the pod's engines (0-1)."""
    kv_capacity_tokens: float | None = None
    """``block_size × num_gpu_blocks`` summed over the pod's engines."""
    prompt_tokens: float | None = None
    """Cumulative counter totals from here on."""
    generation_tokens: float | None = None
    preemptions: float | None = None
    requests_finished: float | None = None
    """``request_success_total`` summed over ``finished_reason``."""
    ttft: Histogram | None = None
    itl: Histogram | None = None


@dataclass(frozen=True)
class ClassSample:
    """One priority class on one router pod."""

    ttft: Histogram | None = None
    itl: Histogram | None = None
    requests_by_code: Mapping[str, float] = field(default_factory=dict)
    """HTTP status code → cumulative requests answered."""
    queueing: Histogram | None = None
    """The TTFT queueing ratio of requests that could meet their target (``None``: the
    router does not export it)."""
    infeasible_by_reason: Mapping[str, float] = field(default_factory=dict)
    """Reason (``ttft``, ``itl``) → cumulative requests no pool size could serve in time."""
    absorbed_requests: float = 0.0
    """Cumulative requests prefilled by a decode engine instead of the prefill pool."""
    absorbed_prompt_tokens: float = 0.0
    """Their cumulative prompt tokens."""


@dataclass(frozen=True)
class RouterSample:
    """One scrape of one router pod."""

    at_s: float
    classes: Mapping[str, ClassSample] = field(default_factory=dict)


def parse_engine_sample(text: str, at_s: float, model_name: str | None = None) -> EngineSample:
    """An engine ``/metrics`` page as a sample; raises ``ExpositionError`` if malformed."""
    # the counters' un-suffixed family names too (see _sum_counter)
    wanted = [*ENGINE_METRICS, *(m.removesuffix("_total") for m in ENGINE_METRICS)]
    by_name = _filtered(parse_exposition(text, only=wanted).by_name(), model_name)
    kv = _values(by_name, ENGINE_KV_USAGE)
    return EngineSample(
        at_s=at_s,
        waiting_requests=_sum(by_name, ENGINE_WAITING),
        waiting_for_capacity=_sum(
            by_name, ENGINE_WAITING_BY_REASON, {ENGINE_REASON_LABEL: ENGINE_CAPACITY_REASON}
        ),
        running_requests=_sum(by_name, ENGINE_RUNNING),
        kv_usage=sum(kv) / len(kv) if kv else None,
        kv_capacity_tokens=_kv_capacity_tokens(by_name.get(_key(ENGINE_CACHE_INFO), [])),
        prompt_tokens=_sum_counter(by_name, ENGINE_PROMPT_TOKENS),
        generation_tokens=_sum_counter(by_name, ENGINE_GENERATION_TOKENS),
        preemptions=_sum_counter(by_name, ENGINE_PREEMPTIONS),
        requests_finished=_sum_counter(by_name, ENGINE_REQUEST_SUCCESS),
        ttft=parse_histogram(by_name, ENGINE_TTFT),
        itl=parse_histogram(by_name, ENGINE_ITL),
    )


def parse_router_sample(text: str, at_s: float) -> RouterSample:
    """A router ``/metrics`` page as a sample; raises ``ExpositionError`` if malformed."""
    by_name = parse_exposition(text, only=ROUTER_METRICS).by_name()
    names = set()
    for metric in (ROUTER_TTFT + "_bucket", ROUTER_ITL + "_bucket", ROUTER_REQUESTS):
        names |= {s.labels.get(ROUTER_CLASS_LABEL) for s in by_name.get(_key(metric), [])}
    requests = _by_class_and(by_name, ROUTER_REQUESTS, ROUTER_CODE_LABEL)
    infeasible = _by_class_and(by_name, ROUTER_INFEASIBLE, ROUTER_REASON_LABEL)
    absorbed = _by_class_and(by_name, ROUTER_ABSORBED, None)
    absorbed_tokens = _by_class_and(by_name, ROUTER_ABSORBED_TOKENS, None)
    classes = {
        cls: ClassSample(
            ttft=parse_histogram(by_name, ROUTER_TTFT, {ROUTER_CLASS_LABEL: cls}),
            itl=parse_histogram(by_name, ROUTER_ITL, {ROUTER_CLASS_LABEL: cls}),
            requests_by_code=requests.get(cls, {}),
            queueing=parse_histogram(by_name, ROUTER_QUEUEING, {ROUTER_CLASS_LABEL: cls}),
            infeasible_by_reason=infeasible.get(cls, {}),
            absorbed_requests=sum(absorbed.get(cls, {}).values()),
            absorbed_prompt_tokens=sum(absorbed_tokens.get(cls, {}).values()),
        )
        for cls in sorted(n for n in names if n is not None)
    }
    return RouterSample(at_s=at_s, classes=classes)


def _by_class_and(
    by_name: Mapping[str, Sequence[Sample]], metric: str, label: str | None
) -> dict[str, dict[str, float]]:
    """Class → value of ``label`` (``""`` when ``None``) → a counter's total."""
    out: dict[str, dict[str, float]] = {}
    for sample in by_name.get(_key(metric), ()):
        cls = sample.labels.get(ROUTER_CLASS_LABEL)
        key = sample.labels.get(label, "") if label is not None else ""
        if cls is not None and not math.isnan(sample.value):
            values = out.setdefault(cls, {})
            values[key] = values.get(key, 0.0) + sample.value
    return out


def _key(name: str) -> str:
    return name.replace(":", "_")


def _filtered(by_name: dict[str, list[Sample]], model_name: str | None) -> dict[str, list[Sample]]:
    if model_name is None:
        return by_name
    return {
        name: [s for s in samples if s.labels.get("model_name", model_name) == model_name]
        for name, samples in by_name.items()
    }


def _values(
    by_name: Mapping[str, Sequence[Sample]], name: str, keep: Mapping[str, str] | None = None
) -> list[float]:
    """The values of ``name``'s samples (those carrying every label of ``keep``)."""
    return [
        s.value
        for s in by_name.get(_key(name), ())
        if not math.isnan(s.value)
        and (keep is None or all(s.labels.get(k) == v for k, v in keep.items()))
    ]


def _sum(
    by_name: Mapping[str, Sequence[Sample]], name: str, keep: Mapping[str, str] | None = None
) -> float | None:
    values = _values(by_name, name, keep)
    return sum(values) if values else None


def _sum_counter(by_name: Mapping[str, Sequence[Sample]], name: str) -> float | None:
    """A counter's total; also accepts the family name without ``_total``, as some
    exporters write it."""
    found = _sum(by_name, name)
    if found is None and name.endswith("_total"):
        found = _sum(by_name, name.removesuffix("_total"))
    return found


def _kv_capacity_tokens(info: Sequence[Sample]) -> float | None:
    """KV tokens per pod from ``cache_config_info``: one series per engine."""
    per_engine: dict[str, float] = {}
    for sample in info:
        try:
            blocks = float(sample.labels["num_gpu_blocks"])
            block_size = float(sample.labels["block_size"])
        except (KeyError, ValueError):
            continue  # e.g. num_gpu_blocks="None" before the engine profiled memory
        if blocks > 0 and block_size > 0 and math.isfinite(blocks * block_size):
            per_engine[sample.labels.get("engine", "")] = blocks * block_size
    return sum(per_engine.values()) if per_engine else None
