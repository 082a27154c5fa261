"""Operator metrics: names, labels, API error classification."""

from __future__ import annotations

from tandem.control.metrics import OperatorMetrics
from tandem.controller.metrics import parse_path


def test_every_metric_is_tandem_operator_or_autoscaler_and_colon_free() -> None:
    text = OperatorMetrics().exposition().decode()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")}
    assert names and all(
        n.startswith(("tandem_operator_", "tandem_autoscaler_")) and ":" not in n for n in names
    )


def test_api_errors_are_counted_by_verb_resource_and_code() -> None:
    metrics = OperatorMetrics()
    metrics.observe_request("PATCH", "/apis/apps/v1/namespaces/a/deployments/x/scale", 409)
    metrics.observe_request("GET", "/api/v1/namespaces/a/events", 0)
    metrics.observe_request("GET", "/api/v1/namespaces/a/events", 200)
    text = metrics.exposition().decode()
    assert (
        'tandem_operator_api_errors_total{code="409",resource="deployments/scale",verb="patch"} 1.0'
    ) in text
    assert 'tandem_operator_api_errors_total{code="0",resource="events",verb="list"} 1.0' in text


def test_parse_path() -> None:
    assert parse_path("/apis/coordination.k8s.io/v1/namespaces/a/leases/l") == ("leases", True)
    assert parse_path("/api/v1/nodes") == ("nodes", False)
