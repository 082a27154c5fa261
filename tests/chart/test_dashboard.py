"""The Grafana dashboard: well-formed, complete, and every query valid PromQL."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART_DIR, REPO, find_tool
from tests.chart.test_alerts import METRIC_RE, PROMTOOL_HINT, record_rules

DASHBOARD = CHART_DIR / "files" / "dashboard.json"
#: What Grafana substitutes at query time, with values valid for a syntax check.
VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$namespace": ".*",
    "$service": ".*",
    "$pool": ".*",
    "$class": ".*",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target, annotation and variable query."""
    out = [(f"panel {p['title']!r}", t["expr"]) for p in panels(dash) for t in p.get("targets", [])]
    out += [
        (f"annotation {a['name']!r}", a["expr"]) for a in dash["annotations"]["list"] if "expr" in a
    ]
    return out


def substitute(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "tandem-inferenceservices"
    assert dashboard["title"].startswith("Tandem")
    assert dashboard["schemaVersion"] >= 36
    assert "id" not in dashboard, "a provisioned dashboard must not carry a database id"


def test_every_panel_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[0] == "datasource"
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"


def test_panel_ids_are_unique_and_grid_does_not_overlap(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"{panel['title']!r} overlaps another panel"
        cells |= mine


def test_every_variable_is_used(dashboard: dict[str, Any]) -> None:
    exprs = " ".join(e for _, e in queries(dashboard))
    for variable in dashboard["templating"]["list"][1:]:
        assert f"${variable['name']}" in exprs, variable["name"]


def test_dashboard_shows_what_an_operator_of_the_service_needs(dashboard: dict[str, Any]) -> None:
    """Per service and pool: desired vs ready replicas, queue depth, KV usage, TTFT/ITL
    p50/p90/p99 against the targets, requests and errors by class, decisions."""
    by_title = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in panels(dashboard)}

    def panel(title: str) -> str:
        assert title in by_title, f"no panel {title!r}"
        return "\n".join(by_title[title])

    replicas = panel("Desired vs ready replicas")
    assert "tandem_autoscaler_desired_replicas" in replicas
    assert "kube_deployment_status_replicas_available" in replicas
    # Both spellings: Prometheus stores vllm_... when it scrapes OpenMetrics.
    assert "vllm[:_]num_requests_waiting" in panel("Queue depth")
    assert "vllm[:_]kv_cache_usage_perc" in panel("KV cache usage")
    for title, metric, signal in (
        ("Time to first token", "tandem_router_time_to_first_token_seconds", "ttft"),
        ("Inter-token latency", "tandem_router_inter_token_latency_seconds", "itl"),
    ):
        text = panel(title)
        for q in ("0.5", "0.9", "0.99"):
            assert (
                f"histogram_quantile({q}, sum by (service, class, le) (rate({metric}_bucket" in text
            )
        assert f'tandem_autoscaler_slo_target_seconds{{signal="{signal}"' in text
    assert "by (service, class)" in panel("Request rate by class")
    errors = panel("Errors and rejections by class")
    assert "tandem_router_requests_total" in errors and "class" in errors
    assert "tandem_router_rejections_total" in errors
    for expr in by_title["Desired vs ready replicas"] + by_title["Queue depth"]:
        assert "pool" in expr and "$service" in expr
    annotations = [
        a for a in dashboard["annotations"]["list"] if a.get("name") == "Scaling decisions"
    ]
    assert annotations and "tandem_autoscaler_decisions_total" in annotations[0]["expr"]
    assert annotations[0]["enable"] is True


def test_every_query_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule) offline."""
    promtool = find_tool("promtool", PROMTOOL_HINT)
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substitute(expr)}
        for i, (_, expr) in enumerate(queries(dashboard))
    ]
    for _, expr in queries(dashboard):
        # $1, $2 are label_replace() groups, not Grafana variables.
        assert not re.search(r"\$\{?[A-Za-z_]", substitute(expr)), f"unknown variable in {expr}"
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ready_replicas_are_matched_to_their_pool(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """The kube-state-metrics join yields one series per service and pool."""
    promtool = find_tool("promtool", PROMTOOL_HINT)
    ready = next(
        t["expr"]
        for p in panels(dashboard)
        if p["title"] == "Desired vs ready replicas"
        for t in p["targets"]
        if "kube_deployment" in t["expr"]
    )
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    test = {
        "rule_files": ["empty.yaml"],
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f"kube_deployment_status_replicas_available{{{labels}}}",
                        "values": v,
                    }
                    for labels, v in (
                        ('namespace="llm", deployment="chat-decode"', "3x5"),
                        ('namespace="llm", deployment="chat-router"', "2x5"),
                        ('namespace="llm", deployment="web"', "9x5"),
                    )
                ]
                + [
                    {
                        "series": 'tandem_autoscaler_desired_replicas{namespace="llm", '
                        'service="chat", pool="decode"}',
                        "values": "4x5",
                    }
                ],
                "promql_expr_test": [
                    {
                        "expr": substitute(ready),
                        "eval_time": "2m",
                        "exp_samples": [
                            {
                                "labels": '{namespace="llm", service="chat", pool="decode"}',
                                "value": 3,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run(
        [promtool, "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_series_the_dashboard_uses_is_documented(dashboard: dict[str, Any]) -> None:
    documented = (REPO / "docs" / "metrics.md").read_text()
    recorded = {r["record"] for r in record_rules()}
    for _, expr in queries(dashboard):
        for name in METRIC_RE.findall(expr):
            if name in recorded:
                continue
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert f"`{base}" in documented, f"{name} is not in docs/metrics.md"
