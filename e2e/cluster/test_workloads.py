"""Deployments on the real control plane: ReplicaSets, scheduling, scale-down and garbage
collection, run by process-backed and processless nodes. Each test works in a namespace of its
own; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from cluster.fixtures import Cluster, wait_for
from cluster.kubeapi import call_json
from cluster.layout import PROCESSLESS_TAINT
from cluster.workloads import (
    apply,
    http_status,
    make_deployment,
    pods,
    sim_engine,
    wait_ready_pods,
)


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
        # started: the startup probe passed; ready: then the readiness probe.
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
    names = set(cluster.info.nodes.processless_names)
    assert names, "this cluster has no processless node: start it with --processless-nodes 1"
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
    assert {p["spec"]["nodeName"] for p in found} <= names
    assert len({p["status"]["podIP"] for p in found}) == 40
    assert all(cluster.pod_dir(namespace, p["metadata"]["name"]) is None for p in found)
    client.AppsV1Api(cluster.api()).patch_namespaced_deployment_scale(
        "many", namespace, {"spec": {"replicas": 0}}, _request_timeout=30
    )
    wait_for(
        lambda: not pods(cluster, namespace, "app=many"), timeout_s=60, what="the 40 pods to go"
    )
