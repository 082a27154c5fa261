"""Factories for simulator tests: services, traces and short runs built in code."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.sim.compare.runs import Scenario, build_scenario
from tandem.traces.parse import TraceRequest, parse_trace, slice_trace
from tandem.traces.rate import scale_rate

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
CODE = TRACES / "AzureLLMInferenceTrace_code.csv"


def make_isvc(
    *,
    prefill_max: int = 8,
    decode_max: int = 8,
    cold_start: str = "30s",
    mode: str = "disaggregated",
    **spec: Any,
) -> InferenceService:
    """Llama-3.1-8B on H100s, TTFT p90 1 s, ITL p90 50 ms (the bench's targets)."""
    body: dict[str, Any] = {
        "model": {"name": "llama", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "mode": mode,
        "qos": {"ttft": {"p90": "1s"}, "itl": {"p90": "50ms"}},
        "autoscaling": {"coldStart": cold_start, "interval": "15s"},
    }
    pool = {"gpu": {"count": 1, "type": "H100"}}
    if mode == "aggregated":
        body["pool"] = {"replicas": {"min": 1, "max": prefill_max}, **pool}
    else:
        body["prefill"] = {"replicas": {"min": 1, "max": prefill_max}, **pool}
        body["decode"] = {"replicas": {"min": 1, "max": decode_max}, **pool}
    body.update(spec)
    return load_inference_service(
        {
            "apiVersion": "serving.tandem.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "simtest", "namespace": "default"},
            "spec": body,
        }
    )


def make_trace(
    n: int = 200, rate_per_s: float = 10.0, seed: int = 0, prompt: int = 800, output: int = 60
) -> list[TraceRequest]:
    """Poisson arrivals with lengths spread around ``prompt`` and ``output`` tokens."""
    rng = random.Random(seed)
    t = 0.0
    out: list[TraceRequest] = []
    for _ in range(n):
        out.append(
            TraceRequest(t, rng.randint(prompt // 4, prompt * 2), rng.randint(1, output * 2))
        )
        t += rng.expovariate(rate_per_s)
    return out


def conv_slice(duration_s: float = 120.0, rate_scale: float = 1.0) -> list[TraceRequest]:
    """The first ``duration_s`` of the Azure conversation trace."""
    trace = slice_trace(parse_trace(CONV.read_text(), CONV.name), 0.0, duration_s)
    return scale_rate(trace, rate_scale, 0)


def make_scenario(
    requests: list[TraceRequest] | None = None, *, warmup_s: float = 60.0, **kw: Any
) -> Scenario:
    isvc = kw.pop("isvc", None) or make_isvc()
    return build_scenario(isvc, requests or make_trace(), warmup_s=warmup_s, **kw)


def bursty_trace(seed: int = 1, span_s: float = 240.0) -> list[TraceRequest]:
    """10 req/s, with a burst of 40 req/s from 80 s to 160 s."""
    rng = random.Random(seed)
    out: list[TraceRequest] = []
    t = 0.0
    while t < span_s:
        rate = 40.0 if 80.0 <= t < 160.0 else 10.0
        out.append(TraceRequest(t, rng.randint(200, 2000), rng.randint(1, 300)))
        t += rng.expovariate(rate)
    return out
