"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback. Does
process, file and HTTP I/O.

``prepare`` makes the certificates, kubeconfigs and audit policy of a run; ``ControlPlane``
starts each component with its log in ``logs/``, waits (bounded) until it answers its
health endpoint, stops it (SIGTERM, then SIGKILL), and restarts one mid-run for fault
tests. What is real here and what is not:

- every port binds 127.0.0.1; etcd speaks plain HTTP to the apiserver on loopback;
- the apiserver runs ``--authorization-mode=Node,RBAC``, the default admission plugins plus
  NodeRestriction, ServiceAccount tokens signed with a key of the run, an audit log at
  Metadata level for every request but health checks;
- ``--service-cluster-ip-range`` is virtual: ClusterIPs are allocated, nothing routes there;
- the controller-manager runs every default controller (``--controllers=*``), each with its
  own ServiceAccount credentials; the controller-manager and the scheduler run without
  leader election (one replica each), so a restart of the apiserver, which outlasts their
  lease renewal deadline, does not make them exit.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from cluster import pki
from cluster.kubeconfig import write_cert_kubeconfig
from cluster.layout import COMPONENTS, ClusterInfo, Layout
from cluster.spawn import Spawner, stop

ISSUER = "https://kubernetes.default.svc.cluster.local"
STOP_GRACE_S = 15.0
# An apiserver still serving watches (controllers, the node agent) drains them for longer
# than a fault test wants to wait; etcd's graceful stop takes about 7 s.
RESTART_GRACE_S = 5.0
READY_TIMEOUT_S = {
    "etcd": 60.0,
    "kube-apiserver": 120.0,
    "kube-controller-manager": 90.0,
    "kube-scheduler": 90.0,
}

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # One event per request (when the response is complete), not two.
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*"]},
        # Metadata names the user, verb, resource, object and response code of every
        # request: enough to count reads and writes per identity, small enough for scale runs.
        {"level": "Metadata"},
    ],
}


class ComponentFailed(RuntimeError):
    """A component exited or did not become healthy in time (the message names its log)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def allocate_ports() -> dict[str, int]:
    names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ports: dict[str, int] = {}
    while len(set(ports.values())) < len(names):
        ports = {n: free_port() for n in names}
    return ports


def prepare(info: ClusterInfo) -> None:
    """Certificates, kubeconfigs and the audit policy of the run described by ``info``."""
    layout = info.layout
    for d in (layout.pki, layout.kubeconfigs, layout.logs, layout.audit_log.parent, layout.pods):
        d.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca(layout.pki)
    pki.make_cert(
        ca,
        layout.pki,
        "apiserver",
        common_name="kube-apiserver",
        server_names=(
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        client=False,
    )
    # The apiserver's own client certificate toward etcd is not needed (plain HTTP on
    # loopback); these are the identities that call the apiserver.
    clients = {
        "admin": (pki.ADMIN_USER, pki.ADMIN_GROUPS),
        "kube-controller-manager": ("system:kube-controller-manager", ()),
        "kube-scheduler": ("system:kube-scheduler", ()),
    }
    clients.update(
        {f"node-{n}": (f"system:node:{n}", ("system:nodes",)) for n in info.nodes.all_names}
    )
    for stem, (user, groups) in clients.items():
        pair = pki.make_cert(ca, layout.pki, stem, common_name=user, organizations=groups)
        write_cert_kubeconfig(
            layout.kubeconfigs / f"{stem}.yaml",
            server=info.apiserver_url,
            ca=ca.cert,
            client=pair,
            name=stem,
        )
    pki.make_signing_key(layout.pki)
    front = pki.make_ca(layout.pki, "tandem-e2e-front-proxy-ca", stem="front-proxy-ca")
    pki.make_cert(front, layout.pki, "front-proxy-client", common_name="front-proxy-client")
    layout.audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    scheduler_config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(layout.kubeconfigs / "kube-scheduler.yaml"),
            "qps": 200,
            "burst": 400,
        },
        "leaderElection": {"leaderElect": False},
    }
    (layout.root / "scheduler-config.yaml").write_text(yaml.safe_dump(scheduler_config))


def component_argv(info: ClusterInfo, component: str) -> list[str]:
    """The command line of one component."""
    layout = info.layout
    bin_dir = Path(info.bin_dir)
    p = info.ports
    pk = layout.pki
    kc = layout.kubeconfigs
    if component == "etcd":
        client = f"http://127.0.0.1:{p['etcd']}"
        peer = f"http://127.0.0.1:{p['etcd-peer']}"
        return [
            str(bin_dir / "etcd"),
            "--name=default",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--listen-metrics-urls=",
            # A test cluster thrown away after the run: durability is not worth the fsyncs.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]
    if component == "kube-apiserver":
        return [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={p['kube-apiserver']}",
            f"--tls-cert-file={pk / 'apiserver.crt'}",
            f"--tls-private-key-file={pk / 'apiserver.key'}",
            f"--client-ca-file={pk / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={info.service_cluster_ip_range}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pk / 'sa.pub'}",
            f"--service-account-signing-key-file={pk / 'sa.key'}",
            f"--requestheader-client-ca-file={pk / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pk / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pk / 'front-proxy-client.key'}",
            f"--audit-policy-file={layout.audit_policy}",
            f"--audit-log-path={layout.audit_log}",
            "--audit-log-format=json",
            # Never rotate: the whole run's log stays one file to count from.
            "--audit-log-maxsize=0",
            "--allow-privileged=true",
            "--profiling=false",
            # The lease reconciler refuses to start with a loopback advertise address
            # ("may not be in the loopback range"), so the `kubernetes` Service has no
            # endpoints; pods reach the apiserver through KUBERNETES_SERVICE_HOST=127.0.0.1.
            "--endpoint-reconciler-type=none",
            "--v=1",
        ]
    if component == "kube-controller-manager":
        own = kc / "kube-controller-manager.yaml"
        return [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={own}",
            f"--authentication-kubeconfig={own}",
            f"--authorization-kubeconfig={own}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p['kube-controller-manager']}",
            f"--cert-dir={pk / 'kube-controller-manager'}",
            f"--service-account-private-key-file={pk / 'sa.key'}",
            f"--root-ca-file={pk / 'ca.crt'}",
            f"--cluster-signing-cert-file={pk / 'ca.crt'}",
            f"--cluster-signing-key-file={pk / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            "--leader-elect=false",
            # The defaults (20/30) throttle the ReplicaSet controller in 200-service runs.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--v=1",
        ]
    if component == "kube-scheduler":
        own = kc / "kube-scheduler.yaml"
        return [
            str(bin_dir / "kube-scheduler"),
            f"--config={layout.root / 'scheduler-config.yaml'}",
            f"--authentication-kubeconfig={own}",
            f"--authorization-kubeconfig={own}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p['kube-scheduler']}",
            "--v=1",
        ]
    raise KeyError(f"unknown component {component!r}; one of {COMPONENTS}")


def _health_url(info: ClusterInfo, component: str) -> str:
    p = info.ports
    return {
        "etcd": f"http://127.0.0.1:{p['etcd']}/health",
        "kube-apiserver": f"https://127.0.0.1:{p['kube-apiserver']}/readyz",
        "kube-controller-manager": f"https://127.0.0.1:{p['kube-controller-manager']}/healthz",
        "kube-scheduler": f"https://127.0.0.1:{p['kube-scheduler']}/healthz",
    }[component]


def _tls_context(layout: Layout, component: str) -> ssl.SSLContext:
    if component == "kube-apiserver":
        ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
        ctx.load_cert_chain(str(layout.pki / "admin.crt"), str(layout.pki / "admin.key"))
        return ctx
    # The controller-manager and the scheduler serve a self-signed certificate of their own.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def check_health(info: ClusterInfo, component: str) -> str | None:
    """None when the component answers healthy, else what it answered."""
    url = _health_url(info, component)
    ctx = None if url.startswith("http:") else _tls_context(info.layout, component)
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
            body = resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}: {err.read().decode(errors='replace')[-300:]}"
    except (OSError, ValueError) as err:
        return str(err)
    if component == "etcd":
        return None if json.loads(body).get("health") == "true" else body
    return None if body.strip() == "ok" else body[-300:]


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@dataclass
class ControlPlane:
    """The running components of one run (owned by the supervisor process)."""

    info: ClusterInfo
    spawner: Spawner

    def __post_init__(self) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, component: str) -> float:
        """Start ``component`` and wait until it is healthy; seconds it took."""
        t0 = time.monotonic()
        log = self.info.layout.log(component)
        with log.open("a") as f:
            f.write(f"\n==== starting {component} at {time.strftime('%H:%M:%S')}\n")
        proc = self.spawner.spawn(component_argv(self.info, component), log_path=log)
        self.procs[component] = proc
        self.info.pids[component] = proc.pid
        self.info.save()
        deadline = t0 + READY_TIMEOUT_S[component]
        last: str | None = "not asked yet"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ComponentFailed(
                    f"{component} exited with status {proc.returncode}; {log}:\n{log_tail(log)}"
                )
            last = check_health(self.info, component)
            if last is None:
                return time.monotonic() - t0
            time.sleep(0.25)
        raise ComponentFailed(
            f"{component} not healthy after {READY_TIMEOUT_S[component]:.0f} s "
            f"(last answer: {last}); {log}:\n{log_tail(log)}"
        )

    def stop(self, component: str, grace_s: float = STOP_GRACE_S) -> int | None:
        proc = self.procs.pop(component, None)
        self.info.pids.pop(component, None)
        if proc is None:
            return None
        return stop(proc, grace_s)

    def start_all(self) -> dict[str, float]:
        return {c: self.start(c) for c in COMPONENTS}

    def stop_all(self) -> None:
        for component in reversed(COMPONENTS):
            self.stop(component)

    def restart(
        self, component: str, down_s: float = 0.0, grace_s: float = RESTART_GRACE_S
    ) -> float:
        """Stop ``component`` (SIGTERM, SIGKILL after ``grace_s``; 0 kills it outright, as
        a crash), keep it down ``down_s`` seconds, start it; seconds until healthy again
        (the apiserver included, which reconnects to a restarted etcd)."""
        if component not in COMPONENTS:
            raise KeyError(f"unknown component {component!r}; one of {COMPONENTS}")
        t0 = time.monotonic()
        self.stop(component, grace_s)
        time.sleep(max(0.0, down_s))
        self.start(component)
        if component == "etcd":
            wait_healthy(self.info, "kube-apiserver", READY_TIMEOUT_S["kube-apiserver"])
        return time.monotonic() - t0

    def exited(self) -> dict[str, int]:
        """Components that exited on their own, with their exit status."""
        return {c: p.returncode for c, p in self.procs.items() if p.poll() is not None}


def wait_healthy(info: ClusterInfo, component: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: str | None = None
    while time.monotonic() < deadline:
        last = check_health(info, component)
        if last is None:
            return
        time.sleep(0.25)
    raise ComponentFailed(f"{component} not healthy after {timeout_s:.0f} s: {last}")
