"""One pod's life on a process-backed node: a thread per pod. Does process, file and API
I/O (with the node's own credentials).

Start: the pod's volumes are written (its ServiceAccount token through TokenRequest,
bound to the pod), each container's environment resolved, and each container's command
started as a process on the pod's loopback IP (``images`` maps the image to a local
program). Then, every 0.2 s: exited containers are restarted per ``restartPolicy`` with
the kubelet's back-off (immediately, then 10 s doubling up to 300 s, reset after 10
minutes up); due probes are run on a shared pool; the status is written when it changed.
Deletion (``deletionTimestamp`` set): every container at once runs its ``preStop`` hook,
gets SIGTERM, and SIGKILL when the grace period ends; then the pod's final status is
written and the pod deleted with ``gracePeriodSeconds=0``, as the kubelet does.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.images import ImageNotRunnable, image_paths, resolve_argv
from cluster.kubeapi import ApiException, call_json
from cluster.nodeagent.container import Container, Launch
from cluster.nodeagent.podspec import (
    Pod,
    SpecError,
    decode_secret,
    expand,
    localize,
    resolve_env,
)
from cluster.nodeagent.podstatus import Conditions, ContainerRun, build_status, now_rfc3339
from cluster.nodeagent.volumes import container_mounts, prepare_volumes
from cluster.spawn import RUN_ENV, Spawner

log = logging.getLogger("cluster.nodeagent")

PODSITE = Path(__file__).resolve().parent.parent / "podsite"
TICK_S = 0.2
DELETE_ATTEMPTS = 12


@dataclass
class NodeContext:
    """What every pod runner of one node shares."""

    node: str
    core: Any
    """``kubernetes.client.CoreV1Api`` authenticated as ``system:node:<node>``."""
    spawner: Spawner
    probe_pool: ThreadPoolExecutor
    pods_dir: Path
    apiserver_port: int
    allocatable: dict[str, str]
    restart_backoff_s: float
    mounts_problem: str | None
    stopping: threading.Event
    host_ip: str = "127.0.0.1"


class PodRunner:
    """Runs one pod's containers until it is deleted or the agent stops."""

    def __init__(self, ctx: NodeContext, pod: Pod, pod_ip: str) -> None:
        self.ctx = ctx
        self.pod = pod
        self.ip = pod_ip
        meta = pod["metadata"]
        self.namespace = str(meta["namespace"])
        self.name = str(meta["name"])
        self.uid = str(meta["uid"])
        self.dir = ctx.pods_dir / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.deletion_grace_s: float | None = None
        self.killed = False
        spec = pod["spec"]
        self.containers = [
            Container(
                spec=c,
                pod=f"{self.namespace}/{self.name}",
                ip=pod_ip,
                pod_dir=self.dir,
                restart_policy=str(spec.get("restartPolicy", "Always")),
                grace_s=float(spec.get("terminationGracePeriodSeconds", 30)),
                restart_backoff_s=ctx.restart_backoff_s,
                spawner=ctx.spawner,
                probe_pool=ctx.probe_pool,
            )
            for c in spec["containers"]
        ]
        self.conditions = Conditions()
        self.start_time = now_rfc3339()
        self.last_status: dict[str, Any] | None = None
        self.thread = threading.Thread(target=self._main, name=f"pod-{self.name}", daemon=True)
        self.update(pod)

    # -- called from the watch thread ------------------------------------------------

    def update(self, pod: Pod) -> None:
        with self.lock:
            self.pod = pod
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") and self.deletion_grace_s is None:
                grace = meta.get("deletionGracePeriodSeconds")
                if grace is None:
                    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
                self.deletion_grace_s = float(grace)
        self.wake.set()

    def kill(self) -> None:
        """Stop the containers now, without hooks or API writes (pod gone, agent stopping)."""
        self.killed = True
        self.wake.set()

    # -- the pod's thread -------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("pod %s/%s: runner failed", self.namespace, self.name)
            self._stop_all(grace_s=2.0, hooks=False)

    @property
    def runs(self) -> list[ContainerRun]:
        return [c.run for c in self.containers]

    def _live(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._publish()
        prepared = False
        while not prepared:
            if self.killed or self.ctx.stopping.is_set():
                return
            if self.deletion_grace_s is not None:
                self._finish()
                return
            try:
                self._prepare()
                prepared = True
            except (SpecError, ImageNotRunnable) as err:
                self._waiting_all("CreateContainerConfigError", str(err))
            except Exception as err:
                self._waiting_all("CreateContainerError", f"{type(err).__name__}: {err}")
            if not prepared:
                self._publish()
                self.wake.wait(2.0)
                self.wake.clear()
        for container in self.containers:
            container.start()
        while True:
            if self.killed or self.ctx.stopping.is_set():
                self._stop_all(grace_s=2.0, hooks=False)
                return
            if self.deletion_grace_s is not None:
                self._stop_all(grace_s=self.deletion_grace_s, hooks=True)
                self._finish()
                return
            now = time.monotonic()
            for container in self.containers:
                container.tick(now)
            self._publish()
            self.wake.wait(TICK_S)
            self.wake.clear()

    def _waiting_all(self, reason: str, message: str) -> None:
        for run in self.runs:
            run.reason, run.message = reason, message
        log.warning("pod %s/%s: %s: %s", self.namespace, self.name, reason, message)

    def _prepare(self) -> None:
        spec = self.pod["spec"]
        if spec.get("initContainers"):
            raise SpecError("init containers are not supported by this node agent")
        core = self.ctx.core

        def secrets(ns: str, name: str) -> dict[str, str] | None:
            raw = self._get(core.read_namespaced_secret, name, ns)
            return None if raw is None else decode_secret(raw.get("data"))

        def configmaps(ns: str, name: str) -> dict[str, str] | None:
            raw = self._get(core.read_namespaced_config_map, name, ns)
            return None if raw is None else dict(raw.get("data") or {})

        def token(audience: str, expiration_s: int) -> str:
            body = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [audience] if audience else [],
                    "expirationSeconds": expiration_s,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.name,
                        "uid": self.uid,
                    },
                },
            }
            sa = spec.get("serviceAccountName") or "default"
            answer = call_json(
                core.create_namespaced_service_account_token, sa, self.namespace, body
            )
            if answer is None:
                raise SpecError(f"ServiceAccount {self.namespace}/{sa} not found")
            return str(answer["status"]["token"])

        volumes = prepare_volumes(
            self.pod,
            self.dir,
            secrets=secrets,
            configmaps=configmaps,
            token=token,
            allocatable=self.ctx.allocatable,
        )
        pod_view = self._pod_with_ips()
        port = str(self.ctx.apiserver_port)
        service_env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://127.0.0.1:{port}",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_PORT": port,
            "KUBERNETES_PORT_443_TCP_ADDR": "127.0.0.1",
        }
        for container in self.containers:
            c = container.spec
            argv, image_env = resolve_argv(
                c.get("image", ""), list(c.get("command") or []), list(c.get("args") or [])
            )
            base = {
                "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", "/root"),
                "LANG": os.environ.get("LANG", "C.UTF-8"),
                "HOSTNAME": self.name,
                **image_env,
                **service_env,
            }
            env = resolve_env(
                pod_view,
                c,
                secrets=secrets,
                configmaps=configmaps,
                allocatable=self.ctx.allocatable,
                base=base,
            )
            # Python programs bind "all addresses" to the pod IP (see podsite/).
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(PODSITE), env.get("PYTHONPATH")) if p
            )
            env["TANDEM_E2E_POD_IP"] = self.ip
            if RUN_ENV in os.environ:  # which run started it (``down`` checks)
                env[RUN_ENV] = os.environ[RUN_ENV]
            mounts = container_mounts(c, volumes)
            if mounts and self.ctx.mounts_problem:
                raise SpecError(
                    f"container {c['name']} needs volume mounts: {self.ctx.mounts_problem}"
                )
            argv = [localize(expand(a, env), self.ip) for a in argv]
            container.launch = Launch(argv=argv, env=env, mounts=mounts, keep=image_paths())

    def _get(self, method: Any, name: str, namespace: str) -> dict[str, Any] | None:
        return call_json(method, name, namespace, _request_timeout=15)

    def _pod_with_ips(self) -> Pod:
        pod = json.loads(json.dumps(self.pod))
        status = pod.setdefault("status", {})
        status.update(
            podIP=self.ip,
            podIPs=[{"ip": self.ip}],
            hostIP=self.ctx.host_ip,
            hostIPs=[{"ip": self.ctx.host_ip}],
        )
        return dict(pod)

    def _stop_all(self, grace_s: float, hooks: bool) -> None:
        """Stop every container at once (each on a thread of its own), as the kubelet does."""
        threads = [
            threading.Thread(
                target=c.stop,
                args=(grace_s,),
                kwargs={"hooks": hooks},
                name=f"stop-{self.name}-{c.name}",
                daemon=True,
            )
            for c in self.containers
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=grace_s + 15)

    # -- API writes ---------------------------------------------------------------------

    def _publish(self) -> None:
        status = build_status(
            self.pod,
            self.runs,
            conditions=self.conditions,
            pod_ip=self.ip,
            host_ip=self.ctx.host_ip,
            start_time=self.start_time,
            initialized=True,
        )
        if status == self.last_status:
            return
        try:
            self.ctx.core.patch_namespaced_pod_status(
                self.name,
                self.namespace,
                {"status": status},
                _content_type="application/merge-patch+json",
                _request_timeout=15,
            )
            self.last_status = status
        except Exception as err:
            log.warning("pod %s/%s: status write failed: %s", self.namespace, self.name, err)

    def _finish(self) -> None:
        """Final status, then the deletion the apiserver waits for (grace 0, this uid)."""
        self._publish()
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        # Retried for a while: the apiserver may be restarting (fault tests).
        for attempt in range(DELETE_ATTEMPTS):
            try:
                self.ctx.core.delete_namespaced_pod(
                    self.name, self.namespace, body=body, _request_timeout=15
                )
                log.info("pod %s/%s: deleted", self.namespace, self.name)
                return
            except ApiException as err:
                if err.status in (404, 409):
                    return
                log.warning("pod %s/%s: delete failed: %s", self.namespace, self.name, err)
            except Exception as err:
                log.warning("pod %s/%s: delete failed: %s", self.namespace, self.name, err)
            if self.ctx.stopping.wait(min(2.0 * (attempt + 1), 10.0)):
                return
