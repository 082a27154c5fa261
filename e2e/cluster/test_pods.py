"""What a process-backed pod gets: its ServiceAccount identity, its environment, restarts and
probes. Each test works in a namespace of its own; every wait is bounded.
"""

from __future__ import annotations

import json
import time
from typing import Any

from cluster import audit
from cluster.fixtures import Cluster, wait_for
from cluster.kubeapi import call_json, core
from cluster.workloads import (
    apply,
    container_status,
    make_pod,
    pods,
)

IN_CLUSTER_PROGRAM = """
from kubernetes import client, config
config.load_incluster_config()
v1 = client.CoreV1Api()
namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
print("pods", len(v1.list_namespaced_pod(namespace).items))
try:
    v1.list_namespaced_secret("default")
    print("secrets allowed")
except client.exceptions.ApiException as err:
    print("secrets", err.status)
"""


def test_in_cluster_config_acts_as_the_pods_service_account(
    cluster: Cluster, namespace: str
) -> None:
    reader = f"system:serviceaccount:{namespace}:reader"
    apply(
        cluster,
        namespace,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader"}],
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client"},
            "spec": {
                "serviceAccountName": "reader",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": "python:3.11-slim",
                        "command": ["python3", "-c", IN_CLUSTER_PROGRAM],
                    }
                ],
            },
        },
    )

    def finished() -> str | None:
        (pod,) = pods(cluster, namespace)
        phase = pod.get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, timeout_s=60, what="the in-cluster client to finish")
    output = cluster.container_log(namespace, "client", "c")
    assert phase == "Succeeded", output
    assert "pods 1" in output
    assert "secrets 403" in output
    events = cluster.audit_events()
    listed = audit.matching(events, user=reader, verb="list", resource="pods", namespace=namespace)
    denied = audit.matching(events, user=reader, verb="list", resource="secrets")
    assert listed and listed[-1]["responseStatus"]["code"] == 200
    assert denied and denied[-1]["responseStatus"]["code"] == 403
    # The token in the pod is bound to it: the apiserver records the pod in the identity.
    extra = listed[-1]["user"].get("extra", {})
    assert extra.get("authentication.kubernetes.io/pod-name") == ["client"]


def test_environment_from_values_downward_api_secrets_and_config_maps(
    cluster: Cluster, namespace: str
) -> None:
    program = "import json, os; print(json.dumps(dict(os.environ)))"
    env = [
        {"name": "PLAIN", "value": "v"},
        {"name": "EXPANDED", "value": "$(PLAIN)-x"},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {
            "name": "MEM_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
        {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "level"}}},
    ]
    apply(
        cluster,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s"},
            "stringData": {"token": "t0k"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm"},
            "data": {"level": "3", "mode": "m"},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "env", "labels": {"tier": "gold"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": "python:3.11-slim",
                        "command": ["python3", "-c", program],
                        "env": env,
                        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                        "resources": {"limits": {"memory": "256Mi"}},
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: pods(cluster, namespace)[0].get("status", {}).get("phase") == "Succeeded",
        timeout_s=60,
        what="the env pod to finish",
    )
    (pod,) = pods(cluster, namespace)
    line = [
        x for x in cluster.container_log(namespace, "env", "c").splitlines() if x.startswith("{")
    ][-1]
    seen = json.loads(line)
    assert seen["PLAIN"] == "v" and seen["EXPANDED"] == "v-x"
    assert (seen["NAME"], seen["NS"], seen["TIER"]) == ("env", namespace, "gold")
    assert seen["IP"] == pod["status"]["podIP"]
    assert seen["NODE"] == pod["spec"]["nodeName"]
    assert seen["SA"] == "default"
    assert seen["MEM_MI"] == "256"
    assert (seen["TOKEN"], seen["LEVEL"]) == ("t0k", "3")
    assert (seen["CM_level"], seen["CM_mode"]) == ("3", "m")
    assert seen["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert seen["KUBERNETES_SERVICE_PORT"] == str(cluster.info.ports["kube-apiserver"])
    assert "KUBECONFIG" not in seen


def test_restart_policy_restarts_a_crashing_container_with_back_off(
    cluster: Cluster, namespace: str
) -> None:
    def pod(name: str, policy: str, script: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": policy,
                "containers": [
                    {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script]}
                ],
            },
        }

    apply(cluster, namespace, pod("crash", "Always", "exit 3"), pod("done", "OnFailure", "exit 0"))
    v1 = core(cluster.api())

    def restarted_twice() -> dict[str, Any] | None:
        got = call_json(v1.read_namespaced_pod, "crash", namespace) or {}
        statuses = got.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0] if statuses[0].get("restartCount", 0) >= 2 else None

    status = wait_for(restarted_twice, timeout_s=40, what="two restarts of the crashing container")
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    done = call_json(v1.read_namespaced_pod, "done", namespace) or {}
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["containerStatuses"][0]["restartCount"] == 0


def test_failing_liveness_probe_restarts_the_container(cluster: Cluster, namespace: str) -> None:
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "command": ["sleep", "600"],
        "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2},
    }
    apply(cluster, namespace, make_pod("live", container, terminationGracePeriodSeconds=1))

    def restarted() -> dict[str, Any] | None:
        status = container_status(cluster, namespace, "live")
        return status if status.get("restartCount", 0) >= 1 else None

    status = wait_for(restarted, timeout_s=30, what="a restart after the liveness probe failed")
    # Killed by the agent: SIGTERM (sleep dies of it), exit status 128 + 15.
    assert status["lastState"]["terminated"]["exitCode"] == 143


def test_a_container_ignoring_sigterm_is_killed_when_the_grace_period_ends(
    cluster: Cluster, namespace: str
) -> None:
    script = "trap '' TERM; echo up; while true; do sleep 0.2; done"
    container = {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script]}
    apply(cluster, namespace, make_pod("stubborn", container, terminationGracePeriodSeconds=3))
    wait_for(
        lambda: container_status(cluster, namespace, "stubborn").get("ready"),
        timeout_s=30,
        what="the pod to run",
    )
    v1 = core(cluster.api())
    t0 = time.monotonic()
    v1.delete_namespaced_pod("stubborn", namespace, _request_timeout=30)
    wait_for(
        lambda: call_json(v1.read_namespaced_pod, "stubborn", namespace) is None,
        timeout_s=30,
        what="the pod to be removed",
    )
    took_s = time.monotonic() - t0
    assert 3.0 <= took_s < 10.0, f"removed after {took_s:.1f} s with a 3 s grace period"
