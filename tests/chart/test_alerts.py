"""Alert rules: promtool checks them and runs their unit tests; each is documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART_DIR, REPO, Rendered, find_tool

ALERTS = CHART_DIR / "files" / "alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOKS = REPO / "docs" / "runbooks.md"
METRICS_DOC = REPO / "docs" / "metrics.md"
RUNBOOK_URL = "https://github.com/tandem-serving/tandem/blob/main/docs/runbooks.md"
PROMTOOL_HINT = "install Debian's `prometheus` package (apt-get install -y prometheus)"

#: What the alerts must cover (issue: SLO burn, prefill backlog, KV saturation or
#: preemptions, pool at max while burning, missing metrics, KV handoff, reconcile
#: errors, operator down).
REQUIRED_ALERTS = {
    "TandemTTFTSLOBurnFast",
    "TandemTTFTSLOBurnSlow",
    "TandemITLSLOBurnFast",
    "TandemITLSLOBurnSlow",
    "TandemPrefillQueueBacklogGrowing",
    "TandemDecodeKVCacheSaturated",
    "TandemDecodePreemptionsRising",
    "TandemPoolAtMaxReplicas",
    "TandemAutoscalerMetricsMissing",
    "TandemKVHandoffFailing",
    "TandemReconcileErrors",
    "TandemOperatorDown",
    "TandemRequestsInfeasible",
}
#: Series names in PromQL: Tandem's, vLLM's (with colons), kube-state-metrics', up.
METRIC_RE = re.compile(r"\b(tandem_[a-z_]+|vllm:[a-z_]+|kube_[a-z_]+|tandem:[a-z_:0-9]+)")


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def record_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "record" in rule]


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_promtool_checks_the_rules_file() -> None:
    promtool = find_tool("promtool", PROMTOOL_HINT)
    out = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_checks_the_rendered_prometheus_rule(
    renders: dict[str, Rendered], tmp_path: Path
) -> None:
    promtool = find_tool("promtool", PROMTOOL_HINT)
    rule = renders["default"].one("PrometheusRule")
    path = tmp_path / "rendered-rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    out = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass() -> None:
    promtool = find_tool("promtool", PROMTOOL_HINT)
    out = subprocess.run(
        [promtool, "test", "rules", UNIT_TESTS.name],
        cwd=UNIT_TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_the_unit_tests_would_catch_a_broken_alert(tmp_path: Path) -> None:
    """The same unit tests against rules whose thresholds were loosened, or that name
    only the colon spelling Prometheus never stores under OpenMetrics, must fail."""
    promtool = find_tool("promtool", PROMTOOL_HINT)
    broken = ALERTS.read_text().replace(
        '({__name__=~"vllm[:_]kv_cache_usage_perc", pool=~"decode|pool"}) > 0.95',
        '({__name__=~"vllm[:_]kv_cache_usage_perc", pool=~"decode|pool"}) > 0.5',
    )
    assert broken != ALERTS.read_text()
    rules = tmp_path / "alerts.yaml"
    rules.write_text(broken)
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [str(rules)]
    tests["tests"] = [t for t in tests["tests"] if t["name"] == "decode-kv-saturated"]
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode != 0, "a loosened KV threshold went unnoticed"
    assert "TandemDecodeKVCacheSaturated" in out.stdout + out.stderr
    colon_only = ALERTS.read_text().replace(
        '{__name__=~"vllm[:_]kv_cache_usage_perc", ', "vllm:kv_cache_usage_perc{"
    )
    rules.write_text(colon_only)
    out = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode != 0, "an alert on vllm:... colon names would miss vllm_... series"


def test_the_unit_tests_would_catch_an_infeasible_alert_firing_too_early(tmp_path: Path) -> None:
    """The infeasible alert fires beyond half the error budget: at a tenth of it, the
    class that stays silent in the unit test (2% with a 10% budget) would fire."""
    promtool = find_tool("promtool", PROMTOOL_HINT)
    text = ALERTS.read_text()
    broken = text.replace(
        "(0.5 * (1 - label_replace(tandem:slo_objective",
        "(0.1 * (1 - label_replace(tandem:slo_objective",
    )
    assert broken != text
    rules = tmp_path / "alerts.yaml"
    rules.write_text(broken)
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [str(rules)]
    tests["tests"] = [t for t in tests["tests"] if t["name"] == "requests-infeasible"]
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode != 0, "an infeasible alert on 2% of a p90 class went unnoticed"
    assert "TandemRequestsInfeasible" in out.stdout + out.stderr


def test_required_alerts_exist() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert names >= REQUIRED_ALERTS, REQUIRED_ALERTS - names


def test_alert_names_are_unique() -> None:
    names = [r["alert"] for r in alert_rules()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_is_documented_and_routed(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning"}
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["summary"].strip() and annotations["description"].strip()
    assert annotations["runbook_url"] == f"{RUNBOOK_URL}#{rule['alert'].lower()}"


def test_every_alert_has_a_runbook_section() -> None:
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    anchors = {anchor(h) for h in headings}
    for rule in alert_rules():
        fragment = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert fragment in anchors, f"docs/runbooks.md has no section for {rule['alert']}"
    # and no stale sections for alerts that are gone
    alert_headings = {h for h in headings if h.startswith("Tandem")}
    assert alert_headings == {r["alert"] for r in alert_rules()}


def test_every_runbook_section_says_what_to_check_and_do() -> None:
    text = RUNBOOKS.read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    for section in sections:
        title = section.split("\n", 1)[0]
        if not title.startswith("Tandem"):
            continue
        assert "**Meaning.**" in section, title
        assert "**Check.**" in section, title
        assert "**Do.**" in section, title


def test_every_alert_fires_and_stays_silent_in_the_unit_tests() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired: set[str] = set()
    silent: set[str] = set()
    for test in tests:
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - fired == set(), f"never shown to fire: {names - fired}"
    assert names - silent == set(), f"never shown to stay silent: {names - silent}"


def test_unit_tests_check_every_annotation() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    for test in tests:
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                assert set(alert["exp_annotations"]) == {"summary", "description", "runbook_url"}


def test_every_series_the_rules_use_is_documented() -> None:
    documented = METRICS_DOC.read_text()
    used: set[str] = set()
    for rule in alert_rules() + record_rules():
        used |= set(METRIC_RE.findall(rule["expr"]))
    recorded = {r["record"] for r in record_rules()}
    for name in sorted(used):
        if name in recorded:
            continue
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert f"`{base}" in documented, f"{name} is used by the alerts but not in docs/metrics.md"
    for name in recorded:
        prefix = re.sub(r":rate\w+$", ":rate", name)
        assert prefix in documented or name in documented, name


def test_recorded_series_are_used() -> None:
    text = ALERTS.read_text()
    dashboard = (CHART_DIR / "files" / "dashboard.json").read_text()
    for rule in record_rules():
        name = rule["record"]
        uses = text.count(name) - sum(1 for r in record_rules() if r["record"] == name)
        assert uses > 0 or name in dashboard, f"{name} is recorded but never used"
