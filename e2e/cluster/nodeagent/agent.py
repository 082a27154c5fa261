"""The node agent's main loop: register the Nodes (``nodes``), follow their Pods. Does
API I/O (as each node's own identity) and starts pod runners.

Per node, a list+watch of the Pods bound to it (``spec.nodeName=<node>``, the selector
the Node authorizer expects), listed again after any error. Each Pod new to the agent
gets a loopback IP (``ips``); on a ``process`` node a ``PodRunner`` runs it, on a
``processless`` node its status is written once (Running, Ready, containers running)
and its deletion is completed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster.kubeapi import ApiException, api_client, call_json, core, watch_events
from cluster.layout import ClusterInfo
from cluster.nodeagent.ips import IpPool
from cluster.nodeagent.nodes import NodeKeeper
from cluster.nodeagent.podstatus import Conditions, ContainerRun, build_status, now_rfc3339
from cluster.nodeagent.runtime import NodeContext, PodRunner
from cluster.nodeagent.volumes import mount_namespaces_work
from cluster.spawn import Spawner

log = logging.getLogger("cluster.nodeagent")

WATCH_TIMEOUT_S = 60
RETRY_S = 2.0


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
        self.nodes = NodeKeeper(self.spec, self.clients, self.core)
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
                allocatable=self.nodes.allocatable(),
                restart_backoff_s=restart_backoff_s,
                mounts_problem=mounts_problem,
                stopping=self.stopping,
            )
            for n in self.spec.all_names
        }

    # -- nodes --------------------------------------------------------------------------

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
            self.nodes.register(node)
        threads = [
            threading.Thread(
                target=self.nodes.heartbeats, args=(self.stopping,), name="heartbeats", daemon=True
            )
        ]
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
