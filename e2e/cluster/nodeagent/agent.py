"""The node agent's main loop: register the Nodes, keep them alive, follow their Pods.
Does API I/O (as each node's own identity) and starts pod runners.

Per node: the Node object (capacity ``cpu``, ``memory``, ``pods``, ``nvidia.com/gpu``;
``Ready``); its Lease in ``kube-node-lease`` renewed every 10 s (the node-lifecycle
controller reads the Lease, so the Node's status is re-posted only every 60 s, as the
kubelet does when nothing changed); a list+watch of the Pods bound to it
(``spec.nodeName=<node>``, the selector the Node authorizer expects).

Each Pod new to the agent gets a loopback IP; in ``process`` mode a ``PodRunner`` runs
it, in ``processless`` mode its status is written once (Running, Ready, containers
running) and its deletion is completed at once. Pod IPs are handed out in order from a
random point of 127.0.1.1–127.0.255.254, so two runs on one machine rarely meet and an
address is not reused soon after its pod went away.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster.kubeapi import ApiException, api_client, call_json, coordination, core, watch_events
from cluster.layout import PROCESSLESS_TAINT, ClusterInfo
from cluster.nodeagent.podstatus import Conditions, ContainerRun, build_status, now_rfc3339
from cluster.nodeagent.runtime import NodeContext, PodRunner
from cluster.nodeagent.volumes import mount_namespaces_work
from cluster.spawn import Spawner

log = logging.getLogger("cluster.nodeagent")

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
STATUS_REPORT_S = 60.0
WATCH_TIMEOUT_S = 60
RETRY_S = 2.0
KUBE_VERSION = "v1.37.2"


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class IpPool:
    """Loopback pod IPs 127.0.X.Y (X 1–255, Y 1–254), handed out round-robin."""

    SIZE = 255 * 254

    def __init__(self, seed: int | None = None) -> None:
        self.next = random.Random(seed).randrange(self.SIZE)
        self.in_use: set[str] = set()
        self.lock = threading.Lock()

    def take(self) -> str:
        with self.lock:
            for _ in range(self.SIZE):
                n = self.next
                self.next = (self.next + 1) % self.SIZE
                ip = f"127.0.{n // 254 + 1}.{n % 254 + 1}"
                if ip not in self.in_use:
                    self.in_use.add(ip)
                    return ip
        raise RuntimeError("no loopback pod IP left")

    def give_back(self, ip: str) -> None:
        with self.lock:
            self.in_use.discard(ip)


class NodeAgent:
    """All nodes of one run, in one process."""

    def __init__(self, info: ClusterInfo, restart_backoff_s: float = 10.0) -> None:
        self.info = info
        self.spec = info.nodes
        self.layout = info.layout
        self.stopping = threading.Event()
        self.spawner = Spawner()
        self.probe_pool = ThreadPoolExecutor(32, thread_name_prefix="probe")
        self.clients = {n: api_client(self.layout.node_kubeconfig(n)) for n in self.spec.all_names}
        self.core = {n: core(c) for n, c in self.clients.items()}
        self.ips = IpPool()
        self.lock = threading.Lock()
        self.runners: dict[str, PodRunner] = {}
        self.processless: dict[str, str] = {}
        """uid -> pod IP of pods marked Running in processless mode."""
        self.node_uids: dict[str, str] = {}
        self._started = now_rfc3339()
        mounts_problem = (
            mount_namespaces_work() if self.spec.names and self.spec.mode == "process" else None
        )
        if mounts_problem:
            log.warning("pods with volumes cannot start: %s", mounts_problem)
        self.contexts = {
            n: NodeContext(
                node=n,
                core=self.core[n],
                spawner=self.spawner,
                probe_pool=self.probe_pool,
                pods_dir=self.layout.pods,
                apiserver_port=info.ports["kube-apiserver"],
                allocatable=self.allocatable(),
                restart_backoff_s=restart_backoff_s,
                mounts_problem=mounts_problem,
                stopping=self.stopping,
            )
            for n in self.spec.all_names
        }

    # -- nodes --------------------------------------------------------------------------

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

    def _heartbeats(self) -> None:
        last_status = time.monotonic()
        while not self.stopping.wait(LEASE_RENEW_S):
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

    # -- pods ---------------------------------------------------------------------------

    def _follow(self, node: str) -> None:
        """List, then watch, the pods bound to ``node``; list again after any error."""
        api = self.core[node]
        selector = f"spec.nodeName={node}"
        while not self.stopping.is_set():
            try:
                listed = call_json(api.list_pod_for_all_namespaces, field_selector=selector)
                if listed is None:
                    raise RuntimeError("pod list answered 404")
                rv = str(listed["metadata"]["resourceVersion"])
                self._sync(node, listed.get("items", []))
                while not self.stopping.is_set():
                    for event in watch_events(
                        api.list_pod_for_all_namespaces,
                        rv,
                        WATCH_TIMEOUT_S,
                        field_selector=selector,
                    ):
                        kind = event["type"]
                        obj = event["object"]
                        if kind == "ERROR":
                            raise RuntimeError(
                                f"watch error: {obj.get('code')} {obj.get('message')}"
                            )
                        rv = str(obj["metadata"]["resourceVersion"])
                        if kind != "BOOKMARK":
                            self._on_pod(node, kind, obj)
                        if self.stopping.is_set():
                            return
            except Exception as err:
                if self.stopping.is_set():
                    return
                log.warning("node %s: pod watch failed (%s); listing again", node, err)
                self.stopping.wait(RETRY_S)

    def _sync(self, node: str, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self._on_pod(node, "ADDED", pod)
        with self.lock:
            gone = [
                uid for uid, r in self.runners.items() if r.ctx.node == node and uid not in seen
            ]
        for uid in gone:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        with self.lock:
            runner = self.runners.pop(uid, None)
            ip = self.processless.pop(uid, None)
        if runner is not None:
            runner.kill()
            ip = runner.ip
        if ip is not None:
            self.ips.give_back(ip)

    def _on_pod(self, node: str, kind: str, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"]["uid"])
        if kind == "DELETED":
            self._forget(uid)
            return
        with self.lock:
            runner = self.runners.get(uid)
            known = uid in self.processless
        if runner is not None:
            runner.update(pod)
            return
        phase = pod.get("status", {}).get("phase")
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if self.spec.mode_of(node) == "processless":
            if deleting:
                self._delete_now(node, pod)
            elif not known and phase not in ("Succeeded", "Failed"):
                self._mark_running(node, pod)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if deleting:
            # Never started here (or the agent restarted): nothing to stop.
            self._delete_now(node, pod)
            return
        runner = PodRunner(self.contexts[node], pod, self.ips.take())
        with self.lock:
            self.runners[uid] = runner
        log.info("pod %s/%s: starting on %s at %s", runner.namespace, runner.name, node, runner.ip)
        runner.thread.start()

    def _mark_running(self, node: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ip = self.ips.take()
        now = now_rfc3339()
        runs = []
        for c in pod["spec"]["containers"]:
            run = ContainerRun(c["name"], c.get("image", ""), state="running", reason="")
            run.started_at, run.ready, run.started = now, True, True
            runs.append(run)
        status = build_status(
            pod,
            runs,
            conditions=Conditions(),
            pod_ip=ip,
            host_ip="127.0.0.1",
            start_time=now,
            initialized=True,
        )
        try:
            self.core[node].patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                {"status": status},
                _content_type="application/merge-patch+json",
                _request_timeout=15,
            )
        except ApiException as err:
            self.ips.give_back(ip)
            log.warning("pod %s/%s: status write failed: %s", meta["namespace"], meta["name"], err)
            return
        with self.lock:
            self.processless[str(meta["uid"])] = ip

    def _delete_now(self, node: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            self.core[node].delete_namespaced_pod(
                meta["name"], meta["namespace"], body=body, _request_timeout=15
            )
        except ApiException as err:
            if err.status not in (404, 409):
                log.warning("pod %s/%s: delete failed: %s", meta["namespace"], meta["name"], err)

    # -- the whole ----------------------------------------------------------------------

    def run(self) -> None:
        """Register, then heartbeat and follow pods until ``stopping`` is set."""
        for node in self.spec.all_names:
            self.register(node)
        threads = [threading.Thread(target=self._heartbeats, name="heartbeats", daemon=True)]
        threads += [
            threading.Thread(target=self._follow, args=(n,), name=f"pods-{n}", daemon=True)
            for n in self.spec.all_names
        ]
        for t in threads:
            t.start()
        log.info(
            "node agent up: %d %s nodes, %d processless",
            len(self.spec.names),
            self.spec.mode,
            len(self.spec.processless_names),
        )
        self.stopping.wait()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop every pod's processes (no hooks, no API writes: the cluster is going away)."""
        with self.lock:
            runners = list(self.runners.values())
            self.runners.clear()
        for r in runners:
            r.kill()
        deadline = time.monotonic() + 20
        for r in runners:
            r.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        alive = [r.name for r in runners if r.thread.is_alive()]
        if alive:
            log.error("pods still stopping at exit: %s", alive)
        self.probe_pool.shutdown(wait=False, cancel_futures=True)
        self.spawner.close()
