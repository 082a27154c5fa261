"""The control plane itself: its programs, its audit log, and restarts of etcd and the apiserver
mid-run. Each test works in a namespace of its own; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import audit
from cluster.binaries import BUILD_COMMAND, BinariesMissing, find_binaries
from cluster.fixtures import Cluster
from cluster.kubeapi import ApiException, call_json, core
from cluster.workloads import (
    apply,
    http_status,
    make_deployment,
    sim_engine,
    wait_ready_pods,
)


def test_missing_programs_fail_with_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_E2E_CACHE", str(tmp_path))
    with pytest.raises(BinariesMissing) as err:
        find_binaries()
    assert BUILD_COMMAND in str(err.value)
    assert "kube-apiserver" in str(err.value)


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
