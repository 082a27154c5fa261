"""Every Tandem series the alerts and the dashboard query is one the code exports.

The documentation tests (``test_alerts.py``, ``test_dashboard.py``) check names against
``docs/metrics.md``; this one checks them against the metric families the operator
(``tandem_operator_*``, ``tandem_autoscaler_*``) and the router (``tandem_router_*``)
actually register, so a renamed metric cannot leave a silent alert behind.
"""

from __future__ import annotations

import json
import re

import pytest

from tandem.control.metrics import OperatorMetrics
from tandem.router.metrics import RouterMetrics
from tests.chart.conftest import CHART_DIR
from tests.chart.test_alerts import ALERTS, alert_rules, record_rules

NAME_RE = re.compile(r"\b(tandem_(?:operator|autoscaler|router)_[a-z0-9_]+)")
SUFFIXES = re.compile(r"_(bucket|count|sum|created)$")


def exported() -> set[str]:
    """Sample names of every family the code registers (``_total`` included)."""
    names: set[str] = set()
    router = RouterMetrics(lambda: [])
    for registry in (OperatorMetrics().registry, router.registry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(f"{family.name}_total")
    return names


def used() -> list[tuple[str, str]]:
    """(where, series name) of every Tandem series in the alerts and the dashboard."""
    out = [
        (f"rule {r.get('alert') or r.get('record')}", name)
        for r in alert_rules() + record_rules()
        for name in NAME_RE.findall(r["expr"])
    ]
    dashboard = json.loads((CHART_DIR / "files" / "dashboard.json").read_text())
    text = json.dumps(dashboard)
    out += [("dashboard", name) for name in NAME_RE.findall(text)]
    return out


def test_the_alerts_and_the_dashboard_query_tandem_series() -> None:
    names = {name for _, name in used()}
    assert any(n.startswith("tandem_autoscaler_") for n in names)
    assert any(n.startswith("tandem_router_") for n in names)
    assert ALERTS.exists()


@pytest.mark.parametrize(("where", "name"), sorted(set(used())))
def test_every_queried_series_is_exported(where: str, name: str) -> None:
    assert SUFFIXES.sub("", name) in exported() or name in exported(), (
        f"{where} queries {name}, which no Tandem component exports"
    )
