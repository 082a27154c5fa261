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

import contextlib
import functools
import json
import logging
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.images import ImageNotRunnable, resolve_argv, resolve_hook
from cluster.kubeapi import ApiException, call_json
from cluster.nodeagent.podspec import (
    Pod,
    Probe,
    SpecError,
    decode_secret,
    expand,
    localize,
    parse_probe,
    resolve_env,
    resolve_port,
)
from cluster.nodeagent.podstatus import Conditions, ContainerRun, build_status, now_rfc3339
from cluster.nodeagent.probes import Outcome, ProbeTracker, check
from cluster.nodeagent.volumes import Mount, container_mounts, prepare_volumes, wrap_with_mounts
from cluster.spawn import Spawner, signal_group

log = logging.getLogger("cluster.nodeagent")

PODSITE = Path(__file__).resolve().parent.parent / "podsite"
TICK_S = 0.2
BACKOFF_CAP_S = 300.0
BACKOFF_RESET_S = 600.0
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
        containers = pod["spec"]["containers"]
        self.runs = [ContainerRun(c["name"], c.get("image", "")) for c in containers]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(containers)
        self.started_mono: list[float] = [0.0] * len(containers)
        self.restart_at: list[float | None] = [None] * len(containers)
        self.trackers: list[dict[str, ProbeTracker]] = [{} for _ in containers]
        self.envs: list[dict[str, str]] = []
        self.argvs: list[list[str]] = []
        self.mounts: list[list[Mount]] = []
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
        for i in range(len(self.runs)):
            self._start(i)
        while True:
            if self.killed or self.ctx.stopping.is_set():
                self._stop_all(grace_s=2.0, hooks=False)
                return
            if self.deletion_grace_s is not None:
                self._stop_all(grace_s=self.deletion_grace_s, hooks=True)
                self._finish()
                return
            self._tick(time.monotonic())
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
        self.envs, self.argvs, self.mounts = [], [], []
        for c in spec["containers"]:
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
            mounts = container_mounts(c, volumes)
            if mounts and self.ctx.mounts_problem:
                raise SpecError(
                    f"container {c['name']} needs volume mounts: {self.ctx.mounts_problem}"
                )
            self.envs.append(env)
            self.argvs.append([localize(expand(a, env), self.ip) for a in argv])
            self.mounts.append(mounts)

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

    # -- containers -------------------------------------------------------------------

    def _start(self, i: int) -> None:
        c = self.pod["spec"]["containers"][i]
        run = self.runs[i]
        cwd = c.get("workingDir")
        log_path = self.dir / f"{run.name}.log"
        with log_path.open("a") as f:
            f.write(f"==== {now_rfc3339()} start #{run.restart_count}: {self.argvs[i]}\n")
        try:
            proc = self.ctx.spawner.spawn(
                wrap_with_mounts(self.argvs[i], self.mounts[i]),
                log_path=log_path,
                env=self.envs[i],
                cwd=Path(cwd) if cwd and Path(cwd).is_dir() else self.dir,
            )
        except OSError as err:
            run.state, run.reason, run.message = "waiting", "RunContainerError", str(err)
            run.exit_code = 128
            self._exited(i, time.monotonic(), started=False)
            return
        now = time.monotonic()
        self.procs[i] = proc
        self.started_mono[i] = now
        run.state, run.reason, run.message = "running", "", ""
        run.started_at = now_rfc3339()
        trackers = {}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = parse_probe(c, c.get(kind))
            if probe is not None:
                trackers[kind] = ProbeTracker.start(probe, now)
        self.trackers[i] = trackers
        run.started = "startupProbe" not in trackers
        run.ready = run.started and "readinessProbe" not in trackers

    def _exited(self, i: int, now: float, started: bool = True) -> None:
        run = self.runs[i]
        proc = self.procs[i]
        code = proc.returncode if proc is not None else run.exit_code
        self.procs[i] = None
        # A process killed by a signal reports 128 + the signal, as a container runtime does.
        run.exit_code = 128 - code if code < 0 else code
        run.finished_at = now_rfc3339()
        if started:
            run.reason = "Completed" if run.exit_code == 0 else "Error"
        run.state = "terminated"
        run.ready = False
        run.started = False
        for tracker in self.trackers[i].values():
            if tracker.pending is not None:
                tracker.pending.cancel()
        self.trackers[i] = {}
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and run.exit_code == 0):
            run.done = True
            return
        ran_s = now - self.started_mono[i] if started else 0.0
        if ran_s >= BACKOFF_RESET_S or run.restart_count == 0:
            delay = 0.0
        else:
            delay = min(self.ctx.restart_backoff_s * 2 ** (run.restart_count - 1), BACKOFF_CAP_S)
        run.last_terminated = run.terminated()
        self.restart_at[i] = now + delay
        if delay > 0:
            run.state = "waiting"
            run.reason = "CrashLoopBackOff"
            run.message = (
                f"back-off {delay:g}s restarting failed container={run.name} pod={self.name}"
            )

    def _tick(self, now: float) -> None:
        for i, run in enumerate(self.runs):
            proc = self.procs[i]
            if proc is not None and proc.poll() is not None:
                log.info(
                    "pod %s/%s: container %s exited %s",
                    self.namespace,
                    self.name,
                    run.name,
                    proc.returncode,
                )
                self._exited(i, now)
            due = self.restart_at[i]
            if self.procs[i] is None and due is not None and now >= due:
                self.restart_at[i] = None
                run.restart_count += 1
                self._start(i)
            if self.procs[i] is not None:
                self._probe(i, now)

    def _probe(self, i: int, now: float) -> None:
        run = self.runs[i]
        trackers = self.trackers[i]
        for kind, tracker in list(trackers.items()):
            if kind != "startupProbe" and not run.started:
                continue
            if kind == "startupProbe" and run.started:
                continue
            if tracker.pending is not None and tracker.pending.done():
                try:
                    outcome = tracker.pending.result()
                except Exception as err:
                    outcome = Outcome(False, f"probe raised {err}")
                result = tracker.record(outcome, now)
                if kind == "startupProbe" and result:
                    run.started = True
                    run.ready = "readinessProbe" not in trackers
                    for other in ("livenessProbe", "readinessProbe"):
                        if other in trackers:
                            trackers[other].next_due = now + trackers[other].probe.initial_delay_s
                elif kind == "readinessProbe" and result is not None:
                    run.ready = result
                elif kind in ("startupProbe", "livenessProbe") and result is False:
                    log.info(
                        "pod %s/%s: container %s failed its %s (%s); restarting it",
                        self.namespace,
                        self.name,
                        run.name,
                        kind,
                        tracker.last_detail,
                    )
                    proc = self.procs[i]
                    if proc is not None:
                        self._signal_and_wait(proc, self._grace_s(), hooks_for=i)
                    return
            if tracker.due(now):
                tracker.pending = self.ctx.probe_pool.submit(
                    check, tracker.probe, self.ip, functools.partial(self._exec, i)
                )

    def _grace_s(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    def _exec(self, i: int, command: list[str], timeout_s: float) -> int:
        """Run ``command`` as the container's exec hook or probe; its exit status."""
        c = self.pod["spec"]["containers"][i]
        argv = [
            localize(expand(a, self.envs[i]), self.ip)
            for a in resolve_hook(c.get("image", ""), command)
        ]
        log_path = self.dir / f"{c['name']}.exec.log"
        proc = self.ctx.spawner.spawn(
            wrap_with_mounts(argv, self.mounts[i]),
            log_path=log_path,
            env=self.envs[i],
            cwd=self.dir,
        )
        try:
            return proc.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise

    def _pre_stop(self, i: int, deadline: float) -> None:
        c = self.pod["spec"]["containers"][i]
        hook = (c.get("lifecycle") or {}).get("preStop")
        if not hook:
            return
        remaining = deadline - time.monotonic()
        t0 = time.monotonic()
        try:
            if "exec" in hook:
                code = self._exec(i, list(hook["exec"].get("command", [])), remaining)
                detail = f"exited {code}"
            elif "httpGet" in hook:
                h = hook["httpGet"]
                probe = Probe(
                    kind="http",
                    port=resolve_port(c, h["port"]),
                    path=str(h.get("path", "/")),
                    host=str(h.get("host", "")),
                    scheme=str(h.get("scheme", "HTTP")),
                    timeout_s=max(remaining, 0.1),
                )
                detail = check(probe, self.ip, lambda _c, _t: 0).detail
            elif "sleep" in hook:
                time.sleep(min(float(hook["sleep"]["seconds"]), max(remaining, 0)))
                detail = "slept"
            else:
                detail = f"unsupported hook {sorted(hook)}"
        except subprocess.TimeoutExpired:
            detail = "ran past the grace period"
        except (OSError, SpecError, ImageNotRunnable) as err:
            detail = f"failed: {err}"
        log.info(
            "pod %s/%s: container %s preStop %s after %.1f s",
            self.namespace,
            self.name,
            c["name"],
            detail,
            time.monotonic() - t0,
        )

    def _signal_and_wait(
        self, proc: subprocess.Popen[bytes], grace_s: float, hooks_for: int | None
    ) -> None:
        deadline = time.monotonic() + grace_s
        if hooks_for is not None:
            self._pre_stop(hooks_for, deadline)
        signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        # The whole group: children the program started must not outlive the container.
        signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("pod %s/%s: process %d survived SIGKILL", self.namespace, self.name, proc.pid)

    def _stop_all(self, grace_s: float, hooks: bool) -> None:
        threads = []
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            t = threading.Thread(
                target=self._signal_and_wait,
                args=(proc, grace_s, i if hooks else None),
                name=f"stop-{self.name}-{i}",
                daemon=True,
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=grace_s + 15)
        now = time.monotonic()
        for i, proc in enumerate(self.procs):
            if proc is not None:
                self._exited(i, now)
            self.runs[i].done = True
            self.restart_at[i] = None
            if self.runs[i].state != "terminated":
                self.runs[i].state = "terminated"
                self.runs[i].finished_at = self.runs[i].finished_at or now_rfc3339()

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
