"""Priority classes, admission and the config an InferenceService gives the router."""

from __future__ import annotations

import pytest

from tandem.api.validate import load_inference_service
from tandem.policy.config import LatencyTargets
from tandem.router.classes import (
    REASON_CLASS_MAX_INFLIGHT,
    REASON_MAX_INFLIGHT,
    Admission,
    UnknownClass,
    resolve_class,
)
from tandem.router.config import ClassConfig, RouterConfig, build_router_config, parse_class_flag
from tests.factories import make_manifest

CLASSES = (ClassConfig("interactive", 0), ClassConfig("batch", 10, max_inflight=2))


def test_header_selects_class_and_absence_means_default() -> None:
    config = RouterConfig(classes=CLASSES, default_class="interactive")
    assert resolve_class("batch", config) == CLASSES[1]
    assert resolve_class(None, config) == CLASSES[0]
    assert resolve_class(" ", config) == CLASSES[0]
    unknown = resolve_class("vip", config)
    assert isinstance(unknown, UnknownClass)
    assert "interactive, batch" in unknown.message


def test_admission_bounds_total_and_per_class() -> None:
    config = RouterConfig(classes=CLASSES, default_class="interactive", max_inflight=3)
    adm = Admission()
    assert adm.try_admit(CLASSES[1], config) is None
    assert adm.try_admit(CLASSES[1], config) is None
    assert adm.try_admit(CLASSES[1], config) == REASON_CLASS_MAX_INFLIGHT
    assert adm.try_admit(CLASSES[0], config) is None
    assert adm.try_admit(CLASSES[0], config) == REASON_MAX_INFLIGHT
    adm.release(CLASSES[1])
    assert adm.try_admit(CLASSES[0], config) is None
    assert adm.total == 3


def test_config_from_an_inference_service() -> None:
    manifest = make_manifest(
        engine={"schedulingPolicy": "priority"},
        router={
            "maxInflight": 64,
            "maxBodyBytes": 4096,
            "priorityHeader": "x-class",
            "shortPromptTokens": 32,
            "maxConnectionsPerClient": 50,
            "timeouts": {
                "connect": "2s",
                "prefill": "10s",
                "firstToken": "20s",
                "idleStream": "30s",
                "requestHeader": "3s",
                "requestBody": "40s",
                "clientIdle": "90s",
            },
        },
        qos={
            "defaultClass": "batch",
            "priorityClasses": [
                {"name": "interactive", "priority": 0},
                {"name": "batch", "priority": 10, "maxInflight": 8},
            ],
        },
    )
    config = build_router_config(load_inference_service(manifest))
    assert config.mode == "disaggregated"
    assert config.max_inflight == 64 and config.max_body_bytes == 4096
    assert config.priority_header == "x-class" and config.short_prompt_tokens == 32
    assert (config.timeouts.connect_s, config.timeouts.prefill_s) == (2.0, 10.0)
    assert (config.timeouts.first_token_s, config.timeouts.idle_stream_s) == (20.0, 30.0)
    timeouts = config.timeouts
    assert (timeouts.request_header_s, timeouts.request_body_s, timeouts.client_idle_s) == (
        3.0, 40.0, 90.0,
    )  # fmt: skip
    assert config.max_connections_per_client == 50
    targets = LatencyTargets(1.0, 90, 0.05, 90)  # the service's qos: no per-class targets
    assert config.classes == (
        ClassConfig("interactive", 0, targets=targets),
        ClassConfig("batch", 10, 8, targets=targets),
    )
    assert config.default_class == "batch"
    assert config.send_priority is True


def test_defaults_without_classes_and_fcfs() -> None:
    config = build_router_config(load_inference_service(make_manifest(mode="aggregated")))
    assert config.mode == "aggregated"
    assert config.class_names() == ["default"] and config.default_class == "default"
    assert config.send_priority is False


def test_default_class_is_the_first_declared() -> None:
    manifest = make_manifest(qos={"priorityClasses": [{"name": "a"}, {"name": "b"}]})
    assert build_router_config(load_inference_service(manifest)).default_class == "a"


def test_class_flag() -> None:
    assert parse_class_flag("a") == ClassConfig("a", 0, None)
    assert parse_class_flag("b:-5") == ClassConfig("b", -5, None)
    assert parse_class_flag("c:1:9") == ClassConfig("c", 1, 9)
    for bad in ("", ":1", "a:x", "a:1:0", "a:1:2:3"):
        with pytest.raises(ValueError):
            parse_class_flag(bad)


def test_each_class_carries_its_targets_and_the_profile_its_rate() -> None:
    manifest = make_manifest(
        qos={
            "ttft": {"p90": "1s", "perPromptToken": "50us"},
            "itl": {"p90": "40ms"},
            "priorityClasses": [
                {"name": "interactive", "ttft": {"p90": "300ms"}},
                {"name": "docs"},
            ],
        },
    )
    manifest["spec"]["prefill"]["profile"] = {"prefillTokensPerS": 28000}
    config = build_router_config(load_inference_service(manifest))
    interactive, docs = config.classes
    assert interactive.targets == LatencyTargets(0.3, 90, 0.04, 90)
    assert docs.targets == LatencyTargets(1.0, 90, 0.04, 90, ttft_per_prompt_token_s=5e-05)
    assert docs.targets.ttft_for(20_000) == pytest.approx(2.0)
    assert config.prefill_tokens_per_s == 28000
