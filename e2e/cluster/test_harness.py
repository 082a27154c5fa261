"""The harness itself against the real control plane: pods scheduled by kube-scheduler,
created by the real ReplicaSet controller, run by the node agent on loopback pod IPs.

Each test works in a namespace of its own; every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from cluster import audit
from cluster.binaries import BUILD_COMMAND, BinariesMissing, find_binaries
from cluster.fixtures import Cluster, wait_for
from cluster.kubeapi import ApiException, call_json, core
from cluster.layout import PROCESSLESS_TAINT

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


def test_missing_programs_fail_with_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_E2E_CACHE", str(tmp_path))
    with pytest.raises(BinariesMissing) as err:
        find_binaries()
    assert BUILD_COMMAND in str(err.value)
    assert "kube-apiserver" in str(err.value)


def test_sim_engine_deployment_becomes_ready_pods_that_answer_on_their_pod_ip(
    cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, make_deployment("sim", replicas=2, container=sim_engine()))
    found = wait_ready_pods(cluster, namespace, "sim", 2)
    ips = [p["status"]["podIP"] for p in found]
    assert len(set(ips)) == 2
    for pod, ip in zip(found, ips, strict=True):
        assert ip.startswith("127.") and ip != "127.0.0.1"
        assert pod["status"]["podIPs"] == [{"ip": ip}]
        assert pod["spec"]["nodeName"] in ("node-0", "node-1")
        assert http_status(f"http://{ip}:8000/health") == 200
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["started"] and "running" in status["state"]
    # The sim engine was told 0.0.0.0 and bound the pod IP only, so both pods use port 8000.
    assert http_status("http://127.0.0.1:8000/health", timeout_s=1) is None


def test_scale_down_runs_the_pre_stop_hook_then_the_process_exits(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pre-stop.txt"
    hook = ["sh", "-c", f"echo $(POD_NAME) >> {marker}"]
    container = sim_engine(
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        lifecycle={"preStop": {"exec": {"command": hook}}},
    )
    apply(cluster, namespace, make_deployment("drain", replicas=2, container=container))
    before = {
        p["metadata"]["name"]: p["status"]["podIP"]
        for p in wait_ready_pods(cluster, namespace, "drain", 2)
    }
    client.AppsV1Api(cluster.api()).patch_namespaced_deployment_scale(
        "drain", namespace, {"spec": {"replicas": 1}}, _request_timeout=30
    )

    def removed() -> str | None:
        names = {p["metadata"]["name"] for p in pods(cluster, namespace, "app=drain")}
        gone = set(before) - names
        return gone.pop() if len(names) == 1 and gone else None

    gone = wait_for(removed, timeout_s=30, what="the scaled-down pod to be deleted")
    assert marker.read_text().split() == [gone]
    assert http_status(f"http://{before[gone]}:8000/health", timeout_s=1) is None
    (kept,) = set(before) - {gone}
    assert http_status(f"http://{before[kept]}:8000/health") == 200


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
    apply(
        cluster,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "live"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
        },
    )
    v1 = core(cluster.api())
    wait_for(
        lambda: (
            (
                (call_json(v1.read_namespaced_pod, "live", namespace) or {})
                .get("status", {})
                .get("containerStatuses")
                or [{}]
            )[0].get("restartCount", 0)
            >= 1
        ),
        timeout_s=30,
        what="a restart after the liveness probe failed",
    )


def test_audit_log_names_the_writer_of_each_object(cluster: Cluster, namespace: str) -> None:
    apply(
        cluster,
        namespace,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "writer"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "cm-writer"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "writer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "cm-writer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "writer"}],
        },
    )
    kubeconfig = cluster.sa_kubeconfig(namespace, "writer")
    cluster.run_kubectl("create", "configmap", "by-sa", "-n", namespace, kubeconfig=kubeconfig)
    denied = cluster.run_kubectl(
        "delete", "configmap", "by-sa", "-n", namespace, kubeconfig=kubeconfig, check=False
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    cluster.run_kubectl("create", "configmap", "by-admin", "-n", namespace)
    events = cluster.audit_events()
    sa_user = f"system:serviceaccount:{namespace}:writer"
    (created,) = audit.matching(
        events, verb="create", resource="configmaps", namespace=namespace, name="by-sa"
    )
    assert audit.username(created) == sa_user and created["responseStatus"]["code"] == 201
    (admin,) = audit.matching(
        events, verb="create", resource="configmaps", namespace=namespace, name="by-admin"
    )
    assert audit.username(admin) == "tandem-e2e-admin"
    (refused,) = audit.matching(events, user=sa_user, verb="delete", resource="configmaps")
    assert refused["responseStatus"]["code"] == 403
    writes = audit.writes_by_user(
        e for e in events if e.get("objectRef", {}).get("namespace") == namespace
    )
    assert writes[sa_user] == 2  # the create, and the refused delete


def test_deleting_a_deployment_lets_the_garbage_collector_remove_its_pods(
    cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, make_deployment("gc", replicas=2, container=sim_engine(), grace_s=2))
    found = wait_ready_pods(cluster, namespace, "gc", 2)
    ips = [p["status"]["podIP"] for p in found]
    apps = client.AppsV1Api(cluster.api())

    def replica_sets() -> list[dict[str, Any]]:
        return list((call_json(apps.list_namespaced_replica_set, namespace) or {})["items"])

    (rs,) = replica_sets()
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    # Background propagation: the Deployment goes at once, the collector removes the rest.
    apps.delete_namespaced_deployment(
        "gc",
        namespace,
        body=client.V1DeleteOptions(propagation_policy="Background"),
        _request_timeout=30,
    )
    wait_for(
        lambda: not pods(cluster, namespace, "app=gc") and not replica_sets(),
        timeout_s=60,
        what="the ReplicaSet and its pods to be collected",
    )
    for ip in ips:
        assert http_status(f"http://{ip}:8000/health", timeout_s=1) is None


def test_processless_node_marks_pods_ready_without_processes(
    cluster: Cluster, namespace: str
) -> None:
    spec = {
        "nodeSelector": {"tandem.dev/e2e-node-mode": "processless"},
        "tolerations": [{"key": PROCESSLESS_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }
    # More pods than the node has GPUs for: requests only of cpu.
    container = sim_engine(resources={"requests": {"cpu": "10m"}})
    apply(
        cluster, namespace, make_deployment("many", replicas=40, container=container, pod_spec=spec)
    )
    found = wait_ready_pods(cluster, namespace, "many", 40, timeout_s=90)
    assert {p["spec"]["nodeName"] for p in found} == {"processless-0"}
    assert len({p["status"]["podIP"] for p in found}) == 40
    assert all(cluster.pod_dir(namespace, p["metadata"]["name"]) is None for p in found)
    client.AppsV1Api(cluster.api()).patch_namespaced_deployment_scale(
        "many", namespace, {"spec": {"replicas": 0}}, _request_timeout=30
    )
    wait_for(
        lambda: not pods(cluster, namespace, "app=many"), timeout_s=60, what="the 40 pods to go"
    )


def test_nodes_stay_ready_and_pods_keep_running_across_etcd_and_apiserver_restarts(
    cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, make_deployment("steady", replicas=1, container=sim_engine()))
    (before,) = wait_ready_pods(cluster, namespace, "steady", 1)
    assert cluster.restart("etcd", down_s=2, grace_s=0) > 2
    assert cluster.restart("kube-apiserver") > 0
    (after,) = wait_ready_pods(cluster, namespace, "steady", 1)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert http_status(f"http://{after['status']['podIP']}:8000/health") == 200
    v1 = core(cluster.api())
    for node in (call_json(v1.list_node) or {})["items"]:
        conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conds["Ready"] == "True", node["metadata"]["name"]
    # A write through the restarted apiserver lands in the restarted etcd.
    v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "after-restart"}}, _request_timeout=30
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(
            namespace, {"metadata": {"name": "after-restart"}}, _request_timeout=30
        )
    assert err.value.status == 409


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
