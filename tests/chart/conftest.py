"""Rendering the Helm chart offline with real Helm (helm-python-sdk), for every test here.

Each named value set is one way an SRE installs the chart; every test that checks a
property of the rendered manifests runs on all of them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "tandem"
RELEASE = "tandem"
NAMESPACE = "tandem-system"
#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the
#: schemas know.
K8S_VERSIONS = ("1.30.0", "1.37.0")

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "cluster": {"scope": "cluster"},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "monitoring-off": {
        "metrics": {"serviceMonitor": {"enabled": False}},
        "prometheusRule": {"enabled": False},
        "dashboard": {"enabled": False},
    },
    "custom-images": {
        "image": {
            "repository": "registry.example.com/mirror/tandem",
            "tag": "0.1.0-patched",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "mirror-credentials"}],
    },
    "digest": {"image": {"digest": "sha256:" + "0123456789abcdef" * 4}},
    "ha": {"replicaCount": 2},
    "ha-namespaced": {
        "replicaCount": 3,
        "watchNamespaces": ["llm"],
        "networkPolicy": {
            "metricsFrom": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ]
        },
        "metrics": {"serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}}},
        "dashboard": {"namespace": "grafana"},
    },
}


@dataclass(frozen=True)
class Rendered:
    """One render of the chart: the manifests by template and as parsed documents."""

    name: str
    values: dict[str, Any]
    templates: dict[str, str]

    @cached_property
    def docs(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path, text in sorted(self.templates.items()):
            if path.endswith("NOTES.txt"):
                continue
            out += [doc for doc in yaml.safe_load_all(text) if doc]
        return out

    @property
    def notes(self) -> str:
        return next(t for p, t in self.templates.items() if p.endswith("NOTES.txt"))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"{self.name}: expected one {kind}, got {len(found)}"
        return found[0]

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def container(self) -> dict[str, Any]:
        containers: list[dict[str, Any]] = self.deployment["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1
        return containers[0]


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    loaded = Chart.load(CHART_DIR)
    yield loaded
    loaded.close()


def render(chart: Chart, name: str, values: dict[str, Any]) -> Rendered:
    templates = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return Rendered(name, values, templates)


@pytest.fixture(scope="session")
def renders(chart: Chart) -> dict[str, Rendered]:
    return {name: render(chart, name, values) for name, values in VALUE_SETS.items()}


@pytest.fixture(params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest, renders: dict[str, Rendered]) -> Rendered:
    return renders[request.param]


def find_tool(name: str, install_hint: str) -> str:
    """The path of a command-line tool the tests need; a clear failure when missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on PATH: {install_hint}", pytrace=False)
    return path
