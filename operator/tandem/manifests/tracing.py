"""OpenTelemetry settings of the router and the vLLM engines, from ``spec.tracing``. Pure.

Both speak OTLP/HTTP (protobuf) to ``<spec.tracing.endpoint>/v1/traces``, each under its
own service name (``<name>-router``, ``<name>-prefill``...), with the parent-based ratio
sampler: a client's sampled ``traceparent`` is always followed, other requests are traced
at ``samplingRatio``. The router reads OpenTelemetry's standard environment; vLLM takes
``--otlp-traces-endpoint`` and reads the same environment for the protocol and sampler.
The simulated engine exports no spans.
"""

from __future__ import annotations

from typing import Any

from tandem.api import InferenceService

TRACES_PATH = "/v1/traces"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL.

    >>> traces_url("http://otel.monitoring:4318/")
    'http://otel.monitoring:4318/v1/traces'
    """
    return endpoint.rstrip("/") + TRACES_PATH


def build_tracing_env(isvc: InferenceService, component: str) -> list[dict[str, Any]]:
    """The ``OTEL_*`` environment of one component's container (none without tracing)."""
    tracing = isvc.spec.tracing
    if tracing is None:
        return []
    values = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_url(tracing.endpoint),
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": f"{isvc.name}-{component}",
        "OTEL_RESOURCE_ATTRIBUTES": f"service.namespace={isvc.namespace}",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{tracing.sampling_ratio:g}",
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def build_tracing_args(isvc: InferenceService) -> list[str]:
    """vLLM's flag for the same collector (none without tracing)."""
    tracing = isvc.spec.tracing
    return [] if tracing is None else ["--otlp-traces-endpoint", traces_url(tracing.endpoint)]
