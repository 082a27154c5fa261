"""Manifest factories and bounded waits for tests against the real control plane. API,
HTTP and process I/O (kubectl)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from typing import Any

from cluster.fixtures import Cluster, wait_for
from cluster.kubeapi import call_json, core

TANDEM_IMAGE = "ghcr.io/tandem-serving/tandem:0.1.0"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def make_deployment(
    name: str,
    *,
    replicas: int = 1,
    container: dict[str, Any],
    grace_s: int = 10,
    pod_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": grace_s,
                    "containers": [container],
                    **(pod_spec or {}),
                },
            },
        },
    }


def sim_engine(**extra: Any) -> dict[str, Any]:
    """The simulated engine as the builders run it: Tandem's image, ``--host 0.0.0.0``."""
    return {
        "name": "engine",
        "image": TANDEM_IMAGE,
        "command": ["tandem", "engine", "sim", "--host", "0.0.0.0", "--port", "8000"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "startupProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 60,
        },
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
        "resources": {
            "requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
            "limits": {"nvidia.com/gpu": "1"},
        },
        **extra,
    }


def apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    manifest = "\n".join(json.dumps(o) for o in objects)
    out = subprocess.run(
        [str(cluster.kubectl), "apply", "-n", namespace, "-f", "-"],
        input=manifest,
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def pods(cluster: Cluster, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    v1 = core(cluster.api())
    listed = call_json(v1.list_namespaced_pod, namespace, label_selector=selector) or {}
    return list(listed.get("items", []))


def ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def wait_ready_pods(
    cluster: Cluster, namespace: str, app: str, count: int, timeout_s: float = 60
) -> list[dict[str, Any]]:
    """Wait until ``app`` has exactly ``count`` pods, all Ready and none terminating."""
    seen: list[str] = []

    def check() -> list[dict[str, Any]] | None:
        found = [
            p
            for p in pods(cluster, namespace, f"app={app}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        seen[:] = [f"{len(found)} pods, {sum(ready(p) for p in found)} Ready"]
        return found if len(found) == count and all(ready(p) for p in found) else None

    try:
        return wait_for(check, timeout_s=timeout_s, what=f"{count} Ready pods of {app}")
    except AssertionError as err:
        raise AssertionError(f"{err} ({seen[0] if seen else 'no answer'})") from None


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status at ``url``; None when nothing listens."""
    try:
        with NO_PROXY.open(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return None


def container_status(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    """The first container's status of ``pod`` ({} before the agent wrote one)."""
    got = call_json(core(cluster.api()).read_namespaced_pod, pod, namespace) or {}
    statuses = got.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def make_pod(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }
