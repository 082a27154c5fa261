"""``spec.tracing``: the router's OpenTelemetry environment, vLLM's flag and environment,
nothing for the simulated engine, and the field rejected where it is malformed."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tandem.api.validate import SpecError, load_inference_service, vllm_serve_flags
from tandem.manifests import Owner, build_children
from tests.factories import make_manifest

TRACING = {"endpoint": "http://otel.monitoring:4318", "samplingRatio": 0.25}


def children(**spec: Any) -> dict[str, dict[str, Any]]:
    isvc = load_inference_service(make_manifest(**spec))
    owner = Owner(isvc.api_version, isvc.kind, isvc.name, "0f6f2c52-2b8e-4d55-9c8a-6c0d7a3f1e11")
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in build_children(isvc, owner)}


def container(child: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = child["spec"]["template"]["spec"]["containers"][0]
    return found


def env_of(child: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(child).get("env", [])}


def test_router_and_vllm_engines_send_spans_to_the_collector() -> None:
    built = children(tracing=TRACING)
    router = env_of(built["Deployment/chat-router"])
    assert router["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://otel.monitoring:4318/v1/traces"
    assert router["OTEL_SERVICE_NAME"] == "chat-router"
    assert router["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert router["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    for role in ("prefill", "decode"):
        engine = built[f"Deployment/chat-{role}"]
        args = container(engine)["command"]
        at = args.index("--otlp-traces-endpoint")
        assert args[at + 1] == "http://otel.monitoring:4318/v1/traces"
        env = env_of(engine)
        assert env["OTEL_SERVICE_NAME"] == f"chat-{role}"
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"  # vLLM: grpc else
    assert "--otlp-traces-endpoint" in vllm_serve_flags()
    for child in built.values():
        if child["kind"] not in ("ServiceMonitor", "PodMonitor"):
            kubernetes_validate.validate(child, "1.30.0", strict=True)


def test_without_tracing_nothing_is_set() -> None:
    built = children()
    assert "env" not in container(built["Deployment/chat-router"])
    engine = built["Deployment/chat-decode"]
    assert "--otlp-traces-endpoint" not in container(engine)["command"]
    assert not any(name.startswith("OTEL_") for name in env_of(engine))


def test_the_simulated_engine_exports_no_spans() -> None:
    built = children(backend="sim", tracing=TRACING)
    assert env_of(built["Deployment/chat-router"])["OTEL_SERVICE_NAME"] == "chat-router"
    engine = built["Deployment/chat-decode"]
    assert not any(name.startswith("OTEL_") for name in env_of(engine))
    assert not any("otlp" in arg for arg in container(engine)["command"])


@pytest.mark.parametrize(
    ("tracing", "engine", "path"),
    [
        ({"endpoint": "otel:4318"}, {}, "spec.tracing.endpoint"),
        ({"endpoint": "http://otel:4318", "samplingRatio": 1.5}, {}, "spec.tracing.samplingRatio"),
        ({}, {}, "spec.tracing.endpoint"),
        (None, {"extraArgs": ["--otlp-traces-endpoint", "http://x:4318/v1/traces"]},
         "spec.engine.extraArgs[0]"),
    ],
)  # fmt: skip
def test_bad_tracing_is_refused_with_its_field(
    tracing: dict[str, Any] | None, engine: dict[str, Any], path: str
) -> None:
    spec: dict[str, Any] = {"engine": engine} if engine else {}
    if tracing is not None:
        spec["tracing"] = tracing
    with pytest.raises(SpecError) as err:
        load_inference_service(make_manifest(**spec))
    assert path in str(err.value)
    if engine:
        assert "spec.tracing.endpoint" in str(err.value)
