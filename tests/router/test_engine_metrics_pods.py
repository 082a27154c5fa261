"""Parsing engine gauges (both spellings) and turning pods into endpoints."""

from __future__ import annotations

from typing import Any

from tandem.router.engine_metrics import parse_engine_gauges
from tandem.router.pods import PodTable, compute_pod_endpoint

PAGE = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 99.0
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
"""


def test_colon_spelling_sums_queues_and_averages_kv() -> None:
    sample = parse_engine_gauges(PAGE)
    assert sample.waiting == 5.0
    assert sample.running == 7.0
    assert sample.kv_usage == 0.375


def test_underscore_spelling_is_the_same() -> None:
    assert parse_engine_gauges(PAGE.replace("vllm:", "vllm_")) == parse_engine_gauges(PAGE)


def test_missing_and_garbage_lines() -> None:
    sample = parse_engine_gauges(
        'vllm:num_requests_running{x="}"} NaN\nvllm_kv_cache_usage_perc oops\n'
    )
    assert (sample.waiting, sample.running, sample.kv_usage) == (None, None, None)
    assert parse_engine_gauges("vllm:num_requests_running 4 1700000000\n").running == 4.0


def make_pod(
    name: str, role: str = "decode", *, ready: bool = True, ip: str = "10.1.0.5", **extra: Any
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"serving.tandem.dev/service": "chat", "serving.tandem.dev/role": role},
        },
        "spec": {
            "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    pod["metadata"].update(extra)
    return pod


def test_ready_engine_pod_is_an_endpoint() -> None:
    assert compute_pod_endpoint(make_pod("a"), "chat") == ("decode", "http://10.1.0.5:8000")
    assert compute_pod_endpoint(make_pod("a", ip="fd00::1"), "chat") == (
        "decode",
        "http://[fd00::1]:8000",
    )


def test_pods_that_are_not_endpoints() -> None:
    assert compute_pod_endpoint(make_pod("a", ready=False), "chat") is None
    assert compute_pod_endpoint(make_pod("a", role="router"), "chat") is None
    assert compute_pod_endpoint(make_pod("a"), "other") is None
    assert (
        compute_pod_endpoint(make_pod("a", deletionTimestamp="2024-01-01T00:00:00Z"), "chat")
        is None
    )
    no_ip = make_pod("a")
    del no_ip["status"]["podIP"]
    assert compute_pod_endpoint(no_ip, "chat") is None


def test_table_folds_list_and_events() -> None:
    table = PodTable("chat")
    table.reset(
        [make_pod("p1", "prefill", ip="10.0.0.1"), make_pod("d1", ip="10.0.0.2", ready=False)]
    )
    assert table.urls_by_role() == {"prefill": ["http://10.0.0.1:8000"], "decode": [], "pool": []}
    table.apply_event("MODIFIED", make_pod("d1", ip="10.0.0.2"))
    table.apply_event("ADDED", make_pod("d2", ip="10.0.0.3"))
    assert table.urls_by_role()["decode"] == ["http://10.0.0.2:8000", "http://10.0.0.3:8000"]
    table.apply_event("DELETED", make_pod("d1", ip="10.0.0.2"))
    table.apply_event("MODIFIED", make_pod("p1", "prefill", ip="10.0.0.1", deletionTimestamp="now"))
    assert table.urls_by_role() == {"prefill": [], "decode": ["http://10.0.0.3:8000"], "pool": []}
