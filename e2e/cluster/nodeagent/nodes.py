"""The Node objects of the node agent and their heartbeats. Does API I/O, as each
node's own identity.

Per node: the Node (capacity ``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``; the
labels of ``NodeSpec.labels``; ``Ready``), and its Lease in ``kube-node-lease`` renewed
every 10 s. The node-lifecycle controller reads the Lease, so the Node's status is
re-posted only every 60 s, as the kubelet does when nothing changed.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Any

from cluster.kubeapi import ApiException, call_json, coordination
from cluster.layout import PROCESSLESS_TAINT, NodeSpec
from cluster.nodeagent.podstatus import now_rfc3339

log = logging.getLogger("cluster.nodeagent")

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
STATUS_REPORT_S = 60.0
KUBE_VERSION = "v1.37.2"


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeKeeper:
    """Registers the nodes of ``spec`` and keeps them alive."""

    def __init__(self, spec: NodeSpec, clients: dict[str, Any], core: dict[str, Any]) -> None:
        self.spec = spec
        self.clients = clients
        self.core = core
        self.node_uids: dict[str, str] = {}
        self._started = now_rfc3339()

    def allocatable(self) -> dict[str, str]:
        return {
            "cpu": self.spec.cpu,
            "memory": self.spec.memory,
            "pods": str(self.spec.max_pods),
            "nvidia.com/gpu": str(self.spec.gpus),
            "ephemeral-storage": "100Gi",
        }

    def node_status(self, node: str) -> dict[str, Any]:
        now = now_rfc3339()
        started = self._started
        conditions = [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": started,
            }
            for kind, status, reason, message in (
                ("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
                (
                    "Ready",
                    "True",
                    "KubeletReady",
                    f"tandem e2e node agent ({self.spec.mode_of(node)})",
                ),
            )
        ]
        return {
            "capacity": self.allocatable(),
            "allocatable": self.allocatable(),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "tandem e2e node agent",
                "containerRuntimeVersion": "process://0",
                "kubeletVersion": KUBE_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self, node: str) -> None:
        api = self.core[node]
        taints = []
        if self.spec.tainted(node):
            taints.append({"key": PROCESSLESS_TAINT, "value": "true", "effect": "NoSchedule"})
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {
                    "kubernetes.io/hostname": node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "node.kubernetes.io/instance-type": "tandem-e2e",
                    "tandem.dev/e2e-node-mode": self.spec.mode_of(node),
                    **self.spec.labels,
                },
            },
            "spec": {"taints": taints},
            "status": self.node_status(node),
        }
        try:
            api.create_node(body, _request_timeout=30)
            log.info("node %s registered", node)
        except ApiException as err:
            if err.status != 409:
                raise
            log.info("node %s already registered", node)
        existing = call_json(api.read_node, node)
        if existing is None:
            raise RuntimeError(f"node {node} vanished right after registering")
        self.node_uids[node] = str(existing["metadata"]["uid"])
        self.post_status(node)
        self.renew_lease(node)

    def post_status(self, node: str) -> None:
        self.core[node].patch_node_status(
            node,
            {"status": self.node_status(node)},
            _content_type="application/strategic-merge-patch+json",
            _request_timeout=15,
        )

    def renew_lease(self, node: str) -> None:
        api = coordination(self.clients[node])
        spec = {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": _micro_time(),
        }
        try:
            api.patch_namespaced_lease(
                node,
                "kube-node-lease",
                {"spec": spec},
                _content_type="application/merge-patch+json",
                _request_timeout=10,
            )
        except ApiException as err:
            if err.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": self.node_uids[node]}
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [owner],
                },
                "spec": spec,
            }
            api.create_namespaced_lease("kube-node-lease", body, _request_timeout=10)

    def heartbeats(self, stopping: threading.Event) -> None:
        """Renew the Leases (and now and then the status) until ``stopping`` is set."""
        last_status = time.monotonic()
        while not stopping.wait(LEASE_RENEW_S):
            post = time.monotonic() - last_status >= STATUS_REPORT_S
            for node in self.spec.all_names:
                try:
                    self.renew_lease(node)
                    if post:
                        self.post_status(node)
                except Exception as err:
                    log.warning("node %s: heartbeat failed: %s", node, err)
            if post:
                last_status = time.monotonic()
