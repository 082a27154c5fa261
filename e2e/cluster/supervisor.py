"""The process that owns one cluster run. Does process, socket and API I/O.

``python -m cluster serve`` (see ``cli``) runs ``serve``: it makes the run's certificates,
starts etcd, the apiserver, the controller-manager, the scheduler and the node agent, waits
until the nodes are Ready and the ``default`` ServiceAccount exists, writes ``ready`` and
then watches its children until SIGTERM or SIGINT, when it stops them all (node agent
first, etcd last). A start that fails writes ``failed`` with the reason and stops what had
started. All children get a parent-death signal (``spawn``), so a supervisor that is
killed outright takes them with it.

Its control socket (``control.sock``, one JSON object per line each way) restarts a
component mid-run for fault tests: ``{"op": "restart", "component": "etcd", "down_s": 5,
"grace_s": 0}`` (``grace_s`` 0: SIGKILL, a crash; default 5 s of SIGTERM first) answers
``{"ok": true, "elapsed_s": ...}`` once the component, and the apiserver, are healthy
again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cluster.controlplane import RESTART_GRACE_S, ControlPlane, allocate_ports, log_tail, prepare
from cluster.kubeapi import api_client, call_json, core
from cluster.layout import COMPONENTS, GPU_LABELS, ClusterInfo, Layout, NodeSpec
from cluster.spawn import RUN_ENV, SETPRIV, Spawner, pid_alive, signal_group, stop, wait_gone

E2E_DIR = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 180.0
UP_TIMEOUT_S = 300.0
DOWN_TIMEOUT_S = 90.0
AGENT_STOP_GRACE_S = 30.0

log = logging.getLogger("cluster.supervisor")


class Stopped(Exception):
    """SIGTERM or SIGINT arrived while starting."""


def child_env(state_dir: Path | None = None) -> dict[str, str]:
    """The environment of the Python children (node agent): this package importable, no
    KUBECONFIG of the caller's that could win over the run's own credentials, and the run
    named (``RUN_ENV``: given, or inherited from the supervisor's own environment)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if state_dir is not None:
        env[RUN_ENV] = str(state_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(E2E_DIR), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _wait_cluster_ready(info: ClusterInfo, agent: subprocess.Popen[bytes]) -> None:
    api = api_client(info.layout.admin_kubeconfig)
    v1 = core(api)
    deadline = time.monotonic() + READY_TIMEOUT_S
    missing: list[str] = []
    try:
        while time.monotonic() < deadline:
            if agent.poll() is not None:
                raise RuntimeError(
                    f"the node agent exited with status {agent.returncode}; "
                    f"{info.layout.log('nodeagent')}:\n{log_tail(info.layout.log('nodeagent'))}"
                )
            listed = call_json(v1.list_node) or {}
            nodes = {n["metadata"]["name"]: n for n in listed.get("items", [])}
            missing = []
            for name in info.nodes.all_names:
                node = nodes.get(name, {})
                conds = {
                    c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])
                }
                # The node-lifecycle controller lifts node.kubernetes.io/not-ready once
                # the node is Ready; until then nothing schedules there.
                taints = [
                    t["key"]
                    for t in node.get("spec", {}).get("taints", []) or []
                    if t["key"].startswith("node.kubernetes.io/")
                ]
                if conds.get("Ready") != "True":
                    missing.append(f"node {name} not Ready")
                elif taints:
                    missing.append(f"node {name} still tainted {taints}")
            if call_json(v1.read_namespaced_service_account, "default", "default") is None:
                missing.append("ServiceAccount default/default not created yet")
            if not missing:
                return
            time.sleep(0.5)
    finally:
        api.close()
    raise RuntimeError(f"cluster not ready after {READY_TIMEOUT_S:.0f} s: {'; '.join(missing)}")


class _ControlServer:
    """Serves the control socket on a thread of its own (requests run one at a time)."""

    def __init__(self, path: Path, plane: ControlPlane, lock: threading.Lock) -> None:
        self.path = path
        self.plane = plane
        self.lock = lock
        self.closing = threading.Event()
        path.unlink(missing_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.sock.settimeout(0.5)
        self.thread = threading.Thread(target=self._run, name="control", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                # A request is one short line; the answer may take minutes (a restart).
                conn.settimeout(30)
                try:
                    line = conn.makefile("r").readline()
                    conn.settimeout(600)
                    answer = self._handle(json.loads(line))
                except Exception as err:
                    answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                conn.sendall((json.dumps(answer) + "\n").encode())

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            with self.lock:
                return {"ok": True, "running": sorted(self.plane.procs)}
        if op == "restart":
            component = str(request["component"])
            down_s = float(request.get("down_s", 0.0))
            grace_s = float(request.get("grace_s", RESTART_GRACE_S))
            log.info("restarting %s (grace %.1f s, down %.1f s)", component, grace_s, down_s)
            with self.lock:
                elapsed = self.plane.restart(component, down_s, grace_s)
            log.info("%s healthy again after %.1f s", component, elapsed)
            return {"ok": True, "elapsed_s": round(elapsed, 3)}
        raise ValueError(f"unknown op {op!r}; one of status, restart")

    def close(self) -> None:
        self.closing.set()
        self.sock.close()
        self.thread.join(timeout=5)
        self.path.unlink(missing_ok=True)


def serve(state_dir: Path, bin_dir: Path, nodes: NodeSpec) -> int:
    """Run a cluster until SIGTERM/SIGINT; 0 after a clean stop, 1 when start failed."""
    layout = Layout(state_dir)
    layout.root.mkdir(parents=True, exist_ok=True)
    for marker in (layout.ready, layout.failed):
        marker.unlink(missing_ok=True)
    info = ClusterInfo(
        state_dir=str(state_dir),
        bin_dir=str(bin_dir),
        ports=allocate_ports(),
        nodes=nodes,
        supervisor_pid=os.getpid(),
    )
    info.save()
    stopping = threading.Event()
    starting = True

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        if starting:
            raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    spawner = Spawner()
    plane = ControlPlane(info, spawner)
    lock = threading.Lock()
    agent: subprocess.Popen[bytes] | None = None
    server: _ControlServer | None = None
    rc = 0
    try:
        t0 = time.monotonic()
        prepare(info)
        timings = plane.start_all()
        log.info("control plane healthy: %s", {k: round(v, 1) for k, v in timings.items()})
        agent = spawner.spawn(
            [sys.executable, "-m", "cluster.nodeagent", "--state-dir", str(state_dir)],
            log_path=layout.log("nodeagent"),
            env=child_env(),
        )
        info.pids["nodeagent"] = agent.pid
        info.save()
        _wait_cluster_ready(info, agent)
        server = _ControlServer(layout.control_socket, plane, lock)
        started_s = time.monotonic() - t0
        layout.ready.write_text(json.dumps({"started_s": round(started_s, 2), **timings}) + "\n")
        log.info("cluster ready in %.1f s", started_s)
        starting = False
        while not stopping.wait(1.0):
            with lock:
                exited = plane.exited()
            if agent is not None and agent.poll() is not None:
                exited["nodeagent"] = agent.returncode
            for name, status in exited.items():
                # Left stopped on purpose: a test must see the failure, not a healed cluster.
                log.error("%s exited on its own with status %s", name, status)
                if name == "nodeagent":
                    agent = None
                else:
                    with lock:
                        plane.procs.pop(name, None)
    except Stopped as why:
        log.info("stopped by %s while starting", why)
        rc = 1
    except Exception as err:
        log.exception("start failed")
        layout.failed.write_text(f"{type(err).__name__}: {err}\n")
        rc = 1
    finally:
        starting = False
        t_stop = time.monotonic()
        if server is not None:
            server.close()
        if agent is not None:
            stop(agent, AGENT_STOP_GRACE_S)
            log.info("node agent stopped in %.1f s", time.monotonic() - t_stop)
        with lock:
            for component in reversed(COMPONENTS):
                t_one = time.monotonic()
                if plane.stop(component) is not None:
                    log.info("%s stopped in %.1f s", component, time.monotonic() - t_one)
        spawner.close()
        layout.ready.unlink(missing_ok=True)
        log.info("stopped")
    return rc


def request(state_dir: Path, payload: dict[str, Any], timeout_s: float = 300.0) -> dict[str, Any]:
    """Send one request to a running supervisor's control socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(Layout(state_dir).control_socket))
        s.sendall((json.dumps(payload) + "\n").encode())
        answer: dict[str, Any] = json.loads(s.makefile("r").readline())
    if not answer.get("ok"):
        raise RuntimeError(f"supervisor refused {payload}: {answer.get('error')}")
    return answer


def serve_argv(state_dir: Path, bin_dir: Path, nodes: NodeSpec) -> list[str]:
    """The command line of ``python -m cluster serve`` for ``nodes``."""
    return [
        sys.executable,
        "-m",
        "cluster",
        f"--state-dir={state_dir}",
        "serve",
        f"--bin-dir={bin_dir}",
        f"--nodes={len(nodes.names)}",
        f"--node-mode={nodes.mode}",
        f"--processless-nodes={len(nodes.processless_names)}",
        f"--node-cpu={nodes.cpu}",
        f"--node-memory={nodes.memory}",
        f"--node-gpus={nodes.gpus}",
        f"--max-pods={nodes.max_pods}",
        *[f"--node-label={k}={v}" for k, v in nodes.labels.items()],
        *[f"--node-label={k}=" for k in GPU_LABELS if k not in nodes.labels],
    ]


def launch(
    state_dir: Path, bin_dir: Path, nodes: NodeSpec, *, detach: bool
) -> subprocess.Popen[bytes]:
    """Start a supervisor in a fresh ``state_dir`` (emptied first).

    ``detach``: it outlives the caller (``kube up``); otherwise it gets the parent-death
    signal, so a test session that dies takes its cluster with it (Linux sends it when
    the calling *thread* exits: call from one that lives as long as the cluster).
    """
    if state_dir.exists():
        shutil.rmtree(state_dir)
    layout = Layout(state_dir)
    layout.logs.mkdir(parents=True)
    argv = serve_argv(state_dir, bin_dir, nodes)
    if not detach and SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
    with layout.log("supervisor").open("ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(state_dir),
            start_new_session=True,
        )


def wait_ready(state_dir: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> ClusterInfo:
    """Wait until the supervisor says ready; raise with its log when it failed."""
    layout = Layout(state_dir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if layout.ready.exists():
            return ClusterInfo.load(state_dir)
        if layout.failed.exists() or proc.poll() is not None:
            reason = layout.failed.read_text().strip() if layout.failed.exists() else "exited"
            proc.wait(timeout=DOWN_TIMEOUT_S)
            raise RuntimeError(
                f"the cluster did not start: {reason}\n{layout.log('supervisor')}:\n"
                f"{log_tail(layout.log('supervisor'), 40)}"
            )
        time.sleep(0.2)
    stop_supervisor(state_dir)
    raise RuntimeError(
        f"the cluster was not ready after {timeout_s:.0f} s; logs in {layout.logs}:\n"
        f"{log_tail(layout.log('supervisor'), 40)}"
    )


def running_info(state_dir: Path) -> ClusterInfo | None:
    """The run in ``state_dir`` if its supervisor is alive and the cluster ready."""
    layout = Layout(state_dir)
    if not layout.info.exists():
        return None
    try:
        info = ClusterInfo.load(state_dir)
    except (ValueError, KeyError, TypeError):
        return None
    if info.supervisor_pid and pid_alive(info.supervisor_pid) and layout.ready.exists():
        return info
    return None


def stop_supervisor(state_dir: Path, timeout_s: float = DOWN_TIMEOUT_S) -> bool:
    """SIGTERM the supervisor and wait; SIGKILL its group (and so, through their death
    signal, its children) if it does not finish in time. False if none was running."""
    try:
        info = ClusterInfo.load(state_dir)
    except FileNotFoundError:
        return False
    pid = info.supervisor_pid
    if not pid or not pid_alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout_s):
        signal_group(pid, signal.SIGKILL)
        wait_gone(pid, 10)
    # Children left by a supervisor that was killed: their pids are in cluster.json.
    for name, child in ClusterInfo.load(state_dir).pids.items():
        if pid_alive(child):
            log.warning("%s (pid %d) outlived the supervisor; killing it", name, child)
            signal_group(child, signal.SIGKILL)
    return True
