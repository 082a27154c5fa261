"""The operator on the real control plane (``e2e/cluster``): ``bench/reconcile.py --real``
and ``--faults``. Starts and stops a cluster, the operator and a fault proxy; reads the
apiserver's audit log.

The cluster has only processless nodes (every pod is marked Running and Ready at once,
no process runs), so the control plane, not the engines, is what is measured. The
operator runs as a local process (as ``tandem operator`` is run against a cluster) under
a ServiceAccount of its own, so the audit log tells its requests apart from everyone
else's. Each figure comes from the audit log, the operator's ``/proc`` and the
apiserver's and etcd's ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "e2e")]

from tests.factories import make_manifest  # noqa: E402

from cluster import audit  # noqa: E402
from cluster.binaries import find_binaries  # noqa: E402
from cluster.faultproxy import FaultProxy  # noqa: E402
from cluster.kubeconfig import request_token, write_token_kubeconfig  # noqa: E402
from cluster.layout import ClusterInfo, NodeSpec  # noqa: E402
from cluster.supervisor import UP_TIMEOUT_S, launch, request, stop_supervisor, wait_ready  # noqa: E402
from suite.convergence import CHILD_RESOURCES, Verdict, check, expected_children  # noqa: E402
from suite.operator import OperatorProcess, cpu_s  # noqa: E402

CRD = REPO / "crds" / "serving.tandem.dev_inferenceservices.yaml"
NAMESPACE = "bench"
OPERATOR_NS = "tandem-bench"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NS}:tandem-operator"
CHILDREN_PER_SERVICE = 14
CHILD_PLURALS = frozenset(r.split(".")[0] for r in CHILD_RESOURCES)
RESYNC_S = 20.0


# -- the cluster ------------------------------------------------------------------------


@dataclass
class Plane:
    info: ClusterInfo
    proc: subprocess.Popen[bytes]
    kubectl: Path
    admin: Path

    def run(self, *args: str, stdin: str | None = None) -> str:
        out = subprocess.run(
            [str(self.kubectl), *args],
            input=stdin,
            # HOME kept: without it kubectl caches discovery under ./.kube.
            env={**os.environ, "KUBECONFIG": str(self.admin)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def component_cpu_s(self) -> float:
        """CPU of the apiserver and etcd so far."""
        return sum(cpu_s(self.info.pids[c]) for c in ("kube-apiserver", "etcd"))


def start_plane(state_dir: Path, nodes: int, pods_per_node: int) -> Plane:
    binaries = find_binaries()
    spec = NodeSpec(
        names=[f"node-{i}" for i in range(nodes)],
        mode="processless",
        gpus=pods_per_node,
        max_pods=pods_per_node,
        cpu="1000",
        memory="8Ti",
    )
    proc = launch(state_dir, binaries.bin_dir, spec, detach=False)
    info = wait_ready(state_dir, proc, UP_TIMEOUT_S)
    plane = Plane(info, proc, binaries.kubectl, info.layout.admin_kubeconfig)
    plane.run("apply", "--server-side", "-f", str(CRD))
    plane.run("wait", "--for=condition=Established", "crd/inferenceservices.serving.tandem.dev")
    for ns in (OPERATOR_NS, NAMESPACE):
        plane.run("create", "namespace", ns)
    plane.run("create", "serviceaccount", "tandem-operator", "-n", OPERATOR_NS)
    plane.run(
        "create", "clusterrolebinding", "tandem-bench", "--clusterrole=cluster-admin",
        f"--serviceaccount={OPERATOR_NS}:tandem-operator",
    )  # fmt: skip
    return plane


def operator_token(plane: Plane) -> str:
    return request_token(plane.admin, OPERATOR_NS, "tandem-operator", 7200)


# -- the audit log ----------------------------------------------------------------------


class AuditTail:
    """The operator's requests, read from the audit log as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.events: list[audit.Event] = []
        self._seen: set[str] = set()

    def read(self) -> list[audit.Event]:
        """New complete events of the operator since the last call."""
        fresh = []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if OPERATOR_USER.encode() not in line:
                continue
            event = json.loads(line)
            if audit.username(event) != OPERATOR_USER or event["auditID"] in self._seen:
                continue
            self._seen.add(event["auditID"])
            fresh.append(event)
        self.events += fresh
        return fresh

    def mark(self) -> int:
        self.read()
        return len(self.events)


def kind_of(event: audit.Event) -> str:
    """What an operator request was for (as the emulator bench counts them)."""
    ref = event.get("objectRef", {})
    if str(event.get("userAgent", "")).startswith("kopf/") or event.get("verb") == "watch":
        return "kopf"  # lists and watches: per resource kind, not per service
    if ref.get("resource") == "leases":
        return "lease"
    if ref.get("resource") == "events":
        return "event"
    if not audit.is_write(event):
        return "read"
    if ref.get("resource") == "inferenceservices" and ref.get("subresource") == "status":
        return "status"
    return "child"


def is_child_create(event: audit.Event) -> bool:
    ref = event.get("objectRef", {})
    return (
        event.get("verb") == "create"
        and ref.get("resource") in CHILD_PLURALS
        and audit.code(event) == 201
    )


def is_status_write(event: audit.Event) -> bool:
    ref = event.get("objectRef", {})
    return (
        ref.get("resource") == "inferenceservices"
        and ref.get("subresource") == "status"
        and audit.is_write(event)
        and audit.code(event) == 200
    )


def quiet(tail: AuditTail, quiet_s: float, timeout_s: float) -> float:
    """Wait until the operator wrote nothing but its Lease for ``quiet_s``; seconds waited."""
    t0 = time.monotonic()
    since = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        writes = [e for e in tail.read() if audit.is_write(e) and kind_of(e) != "lease"]
        if writes:
            since = time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise RuntimeError(f"the operator was still writing after {timeout_s:.0f} s")


# -- one measured run -------------------------------------------------------------------


@dataclass
class RealResult:
    n: int
    children_s: float
    status_s: float
    ready_s: float
    requests: Counter[str]
    status_writes: int
    resync_writes: int
    operator_cpu_s: float
    api_cpu_s: float
    peak_rss_mib: float


def create_services(plane: Plane, names: list[str]) -> None:
    docs = [json.dumps(make_manifest(name, NAMESPACE)) for name in names]
    plane.run("create", "-f", "-", stdin="\n".join(docs))


def wait_operator(port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        try:
            with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=2) as rsp:
                if b"tandem_operator_leader 1.0" in rsp.read():
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the operator did not become the leader")


def all_ready(plane: Plane) -> bool:
    listed = json.loads(plane.run("get", "inferenceservices", "-n", NAMESPACE, "-o", "json"))
    for item in listed["items"]:
        conds = {c["type"]: c["status"] for c in (item.get("status") or {}).get("conditions", [])}
        if conds.get("Ready") != "True":
            return False
    return bool(listed["items"])


def operator_args(port: int, connection: list[str], workers: int) -> list[str]:
    return [
        *connection,
        "--all-namespaces",
        "--metrics-host=127.0.0.1",
        f"--metrics-port={port}",
        "--liveness=none",
        "--leader-election",
        f"--lease-namespace={OPERATOR_NS}",
        "--identity=bench",
        f"--workers={workers}",
        f"--resync-interval={RESYNC_S}",
        # Reconcile cost only, as the emulator bench measures it.
        "--no-autoscaler",
        "--quiet",
    ]


def run_real(n: int, workers: int, free_port: Callable[[], int]) -> RealResult:
    with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
        nodes = max(2, -(-4 * n // 200))
        plane = start_plane(Path(tmp) / "cluster", nodes, pods_per_node=250)
        operator: OperatorProcess | None = None
        try:
            kubeconfig = write_token_kubeconfig(
                Path(tmp) / "operator.yaml", server=plane.info.apiserver_url,
                ca=plane.info.layout.pki / "ca.crt", token=operator_token(plane),
                name="operator", namespace=OPERATOR_NS,
            )  # fmt: skip
            port = free_port()
            operator = OperatorProcess(
                operator_args(port, [f"--kubeconfig={kubeconfig}"], workers),
                Path(tmp) / "operator.log",
            ).start()
            wait_operator(port)
            return measure(plane, operator, n)
        finally:
            if operator is not None:
                operator.end()
            stop_supervisor(plane.info.layout.root)


def measure(plane: Plane, operator: OperatorProcess, n: int) -> RealResult:
    tail = AuditTail(plane.info.layout.audit_log)
    time.sleep(1.0)
    start = tail.mark()
    names = [f"svc-{i:04d}" for i in range(n)]
    cpu0, api0 = operator.current_cpu_s(), plane.component_cpu_s()
    t0 = time.monotonic()
    create_services(plane, names)
    children_s = status_s = ready_s = float("nan")
    created = 0
    statused: set[str] = set()
    while time.monotonic() - t0 < 900:
        for e in tail.read():
            created += is_child_create(e)
            if is_status_write(e):
                statused.add(e["objectRef"]["name"])
        now = time.monotonic() - t0
        if created >= n * CHILDREN_PER_SERVICE and children_s != children_s:
            children_s = now
        if len(statused) >= n and status_s != status_s:
            status_s = now
        if children_s == children_s and status_s == status_s:
            break
        time.sleep(0.2)
    operator_cpu_s = operator.current_cpu_s() - cpu0
    api_cpu_s = plane.component_cpu_s() - api0
    while time.monotonic() - t0 < 900 and not all_ready(plane):
        time.sleep(2)
    ready_s = time.monotonic() - t0
    quiet(tail, quiet_s=5.0, timeout_s=300)
    operator.sample()
    measured = tail.events[start:]
    requests = Counter(kind_of(e) for e in measured)
    status_writes = sum(is_status_write(e) for e in measured)
    resync_mark = tail.mark()
    time.sleep(RESYNC_S + 5)
    tail.read()
    resync_writes = sum(
        1 for e in tail.events[resync_mark:] if audit.is_write(e) and kind_of(e) != "lease"
    )
    return RealResult(
        n, children_s, status_s, ready_s, requests, status_writes, resync_writes,
        operator_cpu_s, api_cpu_s, operator.peak_rss_mib,
    )  # fmt: skip


def report_real(real: list[RealResult], emulated: list[Any]) -> None:
    """The real API server's figures next to the emulator's (``emulated``: its Results)."""
    print(
        f"\n{'API server':>10} {'N':>5} {'children':>9} {'status':>8} {'ready':>7} "
        f"{'req/svc':>8} {'child':>6} {'status':>6} {'reads':>6} {'events':>6} "
        f"{'resync':>7} {'op CPU/svc':>10} {'api CPU/svc':>11} {'peak RSS':>9}"
    )
    by_n = {r.n: r for r in emulated}
    for r in real:
        per = {k: r.requests[k] / r.n for k in ("child", "status", "read", "event")}
        e = by_n.get(r.n)
        if e is not None:
            eper = {k: e.requests[k] / e.n for k in ("child", "status", "read", "event")}
            print(
                f"{'emulated':>10} {e.n:>5} {e.children_s:>8.2f}s {e.status_s:>7.2f}s "
                f"{'-':>7} {eper['child'] + eper['status'] + eper['read']:>8.2f} "
                f"{eper['child']:>6.2f} {eper['status']:>6.2f} {eper['read']:>6.2f} "
                f"{eper['event']:>6.2f} {e.resync_writes:>7} "
                f"{1000 * e.operator_cpu_s / e.n:>8.1f}ms {1000 * e.emulator_cpu_s / e.n:>9.1f}ms "
                f"{e.peak_rss_mib:>7.1f}MiB"
            )
        print(
            f"{'real':>10} {r.n:>5} {r.children_s:>8.2f}s {r.status_s:>7.2f}s "
            f"{r.ready_s:>6.1f}s {per['child'] + per['status'] + per['read']:>8.2f} "
            f"{per['child']:>6.2f} {per['status']:>6.2f} {per['read']:>6.2f} "
            f"{per['event']:>6.2f} {r.resync_writes:>7} "
            f"{1000 * r.operator_cpu_s / r.n:>8.1f}ms {1000 * r.api_cpu_s / r.n:>9.1f}ms "
            f"{r.peak_rss_mib:>7.1f}MiB"
        )
    print(f"""
real: kube-apiserver and etcd built from source (e2e/cluster), every node processless
(pods marked Ready at once); the operator under a ServiceAccount of its own, its requests
counted from the audit log. ready: seconds until every service is Ready (its pods
scheduled and running). status: writes per service (the real API server's Deployments
report their pods as they come, so the status changes more than once). api CPU/svc:
CPU of kube-apiserver + etcd (emulated: the emulator's) per service until every status
was written. resync: writes while every service was reconciled again after
{RESYNC_S:.0f}s with nothing changed.""")


# -- the fault run ----------------------------------------------------------------------


@dataclass
class FaultResult:
    n: int
    converged_s: float
    verdict: Verdict
    requests: Counter[str]
    writes_after: int
    proxy: Counter[str]
    timeline: list[str] = field(default_factory=list)
    restart_codes: list[int] = field(default_factory=list)


def run_faults(n: int, workers: int, free_port: Callable[[], int], seed: int) -> FaultResult:
    """N services created at once through a fault proxy (10 % of the requests fail, every
    watch cut after 10 s), an apiserver restart, an etcd restart and 5 operator restarts
    (SIGKILL and SIGTERM in turn) while the operator converges."""
    with tempfile.TemporaryDirectory(prefix="tandem-faults-") as tmp:
        nodes = max(2, -(-4 * n // 200))
        plane = start_plane(Path(tmp) / "cluster", nodes, pods_per_node=250)
        operator: OperatorProcess | None = None
        try:
            ca = plane.info.layout.pki / "ca.crt"
            with FaultProxy(plane.info.apiserver_url, ca, share=0.1, watch_cut_s=10.0,
                            seed=seed) as proxy:  # fmt: skip
                port = free_port()
                connection = [f"--server={proxy.url}", f"--token={operator_token(plane)}"]
                operator = OperatorProcess(
                    operator_args(port, connection, workers), Path(tmp) / "operator.log"
                ).start()
                wait_operator(port, timeout_s=240)
                result = disrupt_and_converge(plane, operator, proxy, n)
                result.proxy = Counter(proxy.stats)
                return result
        finally:
            if operator is not None:
                operator.end()
            stop_supervisor(plane.info.layout.root)


def disrupt_and_converge(
    plane: Plane, operator: OperatorProcess, proxy: FaultProxy, n: int
) -> FaultResult:
    tail = AuditTail(plane.info.layout.audit_log)
    start = tail.mark()
    names = [f"svc-{i:04d}" for i in range(n)]
    expected = {name: expected_children(make_manifest(name, NAMESPACE)) for name in names}
    timeline: list[str] = []
    codes: list[int] = []
    t0 = time.monotonic()

    def note(what: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f}s {what}")

    def restart_component(component: str, down_s: float, grace_s: float) -> None:
        answer = request(
            plane.info.layout.root,
            {"op": "restart", "component": component, "down_s": down_s, "grace_s": grace_s},
        )
        note(f"{component} restarted (healthy again after {answer['elapsed_s']:.1f} s)")

    schedule: list[tuple[float, str, Callable[[], None]]] = [
        (3, "operator SIGKILL", lambda: codes.append(operator.restart(signal.SIGKILL))),
        (8, "apiserver", lambda: restart_component("kube-apiserver", 2, 5)),
        (16, "operator SIGTERM", lambda: codes.append(operator.restart(signal.SIGTERM))),
        (24, "etcd", lambda: restart_component("etcd", 3, 0)),
        (32, "operator SIGKILL", lambda: codes.append(operator.restart(signal.SIGKILL))),
        (42, "operator SIGTERM", lambda: codes.append(operator.restart(signal.SIGTERM))),
        (52, "operator SIGKILL", lambda: codes.append(operator.restart(signal.SIGKILL))),
    ]
    create_services(plane, names)
    note(f"{n} InferenceServices created")
    for at, what, act in schedule:
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        note(f"{what}: begin")
        act()
    verdict = Verdict()
    converged_s = float("nan")
    while time.monotonic() - t0 < 1200:
        tail.read()
        verdict = check(
            plane.kubectl, plane.admin, NAMESPACE, expected,
            audit_log=plane.info.layout.audit_log, operator_user=OPERATOR_USER,
        )  # fmt: skip
        if verdict.converged and all_ready(plane):
            converged_s = time.monotonic() - t0
            note("every service converged and Ready")
            break
        time.sleep(3)
    # The last statuses of the convergence may still be landing: wait for 5 s without
    # a write (a storm never gives them), then count the writes of a window longer than
    # a resync interval, which must be none.
    settle_s = quiet(tail, quiet_s=5.0, timeout_s=120)
    note(f"no write for 5 s after {settle_s:.1f} s more")
    after_mark = tail.mark()
    time.sleep(RESYNC_S + 10)
    tail.read()
    writes_after = sum(
        1 for e in tail.events[after_mark:] if audit.is_write(e) and kind_of(e) != "lease"
    )
    requests = Counter(kind_of(e) for e in tail.events[start:after_mark])
    return FaultResult(n, converged_s, verdict, requests, writes_after, Counter(), timeline, codes)


def report_faults(r: FaultResult, clean: RealResult | None) -> None:
    per = {k: r.requests[k] / r.n for k in ("child", "status", "read", "event", "kopf")}
    print(f"\nfault run: {r.n} InferenceServices through the fault proxy")
    for line in r.timeline:
        print(f"  {line}")
    print(f"  operator exit codes at its restarts: {r.restart_codes}")
    print(f"  proxy: {dict(sorted(r.proxy.items()))}")
    print(
        f"  converged: {'yes' if r.verdict.converged else 'NO'} after {r.converged_s:.1f} s "
        f"({r.verdict.summary()})"
    )
    print(
        f"  per service: {per['child']:.2f} child writes, {per['status']:.2f} status writes, "
        f"{per['read']:.2f} reads, {per['event']:.2f} Events; {per['kopf']:.2f} lists/watches"
    )
    if clean is not None:
        cw = clean.requests["child"] / clean.n
        print(f"  child writes per service against a clean run: x{per['child'] / cw:.2f}")
    print(
        f"  writes in the {RESYNC_S + 10:.0f} s after it settled (a resync included): "
        f"{r.writes_after} (a storm would not stop)"
    )
