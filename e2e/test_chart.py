"""Tandem as an SRE runs it, on the real control plane of ``e2e/cluster``: the chart
installed with the real Helm, the example applied with ``kubectl``, the operator running
as a pod under its own ServiceAccount (so the chart's RBAC is what the API server
enforces), and everything the operator asks for done by Kubernetes' own controllers.

The tests share one cluster, one Helm release and one InferenceService
(``examples/sim.yaml``, the simulated engine) and run in order, as the story goes:

install → invalid manifests refused → Ready, ``kubectl get tisvc`` → OpenAI through the
router pod → load scales each pool (``deployments/scale``; the ReplicaSet controller,
the scheduler and the node agent bring the pods; the router routes to them) → a PDB
holds during an eviction → after the load the pools shrink, the least-loaded pods
(lowest ``pod-deletion-cost``) first, with no failed request → the leader operator
killed mid-reconcile comes back and converges → only the leader ever wrote (the audit
log) → ``helm upgrade`` changes a setting → the garbage collector removes every child.

What is checked elsewhere, not repeated here: the whole corpus of invalid manifests
against the CRD's schema and CEL rules, the admission policies and ``kubectl auth
can-i --as`` for the operator's account (no Secrets, no ``pods/exec``) in
``e2e/test_policy.py``; the harness's own pods, probes and restarts in ``e2e/cluster``.
Clients reach pods by pod IP (there is no Service routing here, see
``e2e/cluster/README.md``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from openai import OpenAI
from urllib3.exceptions import ProtocolError

from cluster import audit
from cluster.fixtures import Cluster, wait_for
from cluster.layout import PROCESSLESS_TAINT
from suite.leadership import compute_leadership
from suite.load import Load, at_rate, load_trace, with_bursts
from suite.objects import (
    CHILD_RESOURCES,
    DELETION_COST,
    ROLE_LABEL,
    SERVICE_LABEL,
    children,
    condition,
    get_isvc,
    get_json,
    http_get,
    http_status,
    is_ready,
    owned_by,
    pod_ready,
    pods,
    pool_pods,
    ready_ips,
    ready_isvc,
    replicas,
    router_endpoints,
)

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "tandem"
EXAMPLE = REPO / "examples" / "sim.yaml"
RELEASE = "tandem"
OPERATOR_NS = f"tandem-e2e-{uuid.uuid4().hex[:6]}"
OPERATOR_SA = f"system:serviceaccount:{OPERATOR_NS}:tandem-operator"
OPERATOR_SELECTOR = "app.kubernetes.io/name=tandem-operator"
LEASE = "tandem-operator"
GC_USER = "system:serviceaccount:kube-system:generic-garbage-collector"
RS_USER = "system:serviceaccount:kube-system:replicaset-controller"
POOLS = ("prefill", "decode")
#: The chart as installed on a cluster without the Prometheus Operator: two replicas (one
#: leader, one hot standby), serving the release namespace (the default).
VALUES: dict[str, Any] = {
    "replicaCount": 2,
    "metrics": {"serviceMonitor": {"enabled": False}},
    "prometheusRule": {"enabled": False},
}
#: The load: the conversation trace at three times its rate (what `tandem up` shows in
#: the README), which grows the decode pool, and every 10 s a burst of 40 document-sized
#: prompts, which one prefill engine cannot absorb within the TTFT target; bounded in
#: requests and seconds.
LOAD_RATE_SCALE = 3.0
BURST_EVERY_S = 10.0
BURST_SIZE = 40
BURST_PROMPT_TOKENS = 7000
LOAD_MAX_REQUESTS = 3000
LOAD_MAX_S = 300.0
#: Light traffic while the pools shrink; none of it may fail.
DRAIN_RATE_SCALE = 0.25
#: Long requests sent straight to one decode pod while the pools shrink: its deletion
#: cost (running sequences × 10) stays above every other pod's, so it must be kept.
BUSY_STREAMS = 8
BUSY_TOKENS = 1500


@dataclass
class Service:
    namespace: str
    name: str
    model: str
    uid: str


@dataclass
class Story:
    """What earlier tests learnt, for later ones (the tests run in order)."""

    grown: dict[str, int] = field(default_factory=dict)
    killed: str = ""


STORY = Story()
pytestmark = pytest.mark.timeout(900)


def helm(cluster: Cluster, *args: str, timeout_s: float = 420, check: bool = True) -> str:
    out = subprocess.run(
        [str(cluster.helm), *args],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return pods(cluster, OPERATOR_NS, OPERATOR_SELECTOR)


def lease_holder(cluster: Cluster) -> str:
    lease = get_json(cluster, "lease", LEASE, "-n", OPERATOR_NS)
    return str(lease["spec"].get("holderIdentity") or "")


def operator_log_tails(cluster: Cluster) -> str:
    out = []
    for pod in sorted(cluster.info.layout.pods.glob(f"{OPERATOR_NS}_*")):
        log = pod / "operator.log"
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()[-60:]
            out.append(f"---- {pod.name}\n" + "\n".join(lines))
    return "\n".join(out)


@dataclass
class Release:
    namespace: str
    notes: str
    """What ``helm install`` printed after the release (the chart's NOTES.txt)."""


@pytest.fixture(scope="module")
def release(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """``helm install`` of the chart. Uninstalled (and what it served removed) at the end,
    a failed install included: its cluster-scoped objects would refuse the next suite's."""
    values = tmp_path_factory.mktemp("chart") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    try:
        notes = helm(
            cluster, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NS,
            "--create-namespace", "--values", str(values), "--wait", "--timeout", "5m",
        )  # fmt: skip
        yield Release(OPERATOR_NS, notes)
    finally:
        print(operator_log_tails(cluster))
        cluster.run_kubectl(
            "delete", "inferenceservices", "--all", "-n", OPERATOR_NS, "--wait=true",
            "--timeout=120s", check=False, timeout_s=180,
        )  # fmt: skip
        helm(cluster, "uninstall", RELEASE, "--namespace", OPERATOR_NS, "--wait", check=False)
        cluster.run_kubectl("delete", "namespace", OPERATOR_NS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def service(cluster: Cluster, release: Release) -> Service:
    """``kubectl apply -n NS -f examples/sim.yaml`` exactly as the chart's notes say; Ready."""
    (line,) = [x.strip() for x in release.notes.splitlines() if "-f examples/sim.yaml" in x]
    kubectl, apply, flag, ns, f, path = line.split()
    assert (kubectl, apply, flag, f, path) == ("kubectl", "apply", "-n", "-f", "examples/sim.yaml")
    assert ns == release.namespace, "by default the chart serves its own namespace"
    cluster.run_kubectl("apply", "-n", ns, "-f", str(REPO / path))
    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    try:
        body = wait_for(
            lambda: ready_isvc(cluster, ns, name),
            timeout_s=240,
            every_s=2,
            what=f"InferenceService {ns}/{name} Ready",
        )
    except AssertionError:
        print(operator_log_tails(cluster))
        raise
    return Service(ns, name, manifest["spec"]["model"]["name"], body["metadata"]["uid"])


def router_ip(cluster: Cluster, svc: Service) -> str:
    (pod,) = [p for p in pool_pods(cluster, svc.namespace, svc.name, "router") if pod_ready(p)]
    return str(pod["status"]["podIP"])


def pool_sizes(cluster: Cluster, svc: Service) -> dict[str, int]:
    return {role: replicas(cluster, svc.namespace, f"{svc.name}-{role}") for role in POOLS}


class Decisions:
    """The pools' sizes and the autoscaler's last message, polled and kept as they change
    (printed as they come, and named when a wait fails)."""

    def __init__(self, cluster: Cluster, svc: Service) -> None:
        self.cluster = cluster
        self.svc = svc
        self.t0 = time.monotonic()
        self.seen: list[str] = []
        self.last = ""

    def poll(self) -> dict[str, int]:
        sizes = pool_sizes(self.cluster, self.svc)
        body = get_isvc(self.cluster, self.svc.namespace, self.svc.name)
        message = (condition(body, "ScalingActive") or {}).get("message", "")
        line = f"{sizes} {message}"
        if line != self.last:
            self.last = line
            self.seen.append(f"{time.monotonic() - self.t0:5.0f}s {line}")
            print(self.seen[-1])
        return sizes

    def wait(
        self, done: Callable[[dict[str, int]], bool], *, timeout_s: float, what: str
    ) -> dict[str, int]:

        def check() -> dict[str, int] | None:
            sizes = self.poll()
            return sizes if done(sizes) else None

        try:
            return wait_for(
                check,
                timeout_s=timeout_s,
                every_s=2,
                what=what,
            )
        except AssertionError as err:
            history = "\n".join(self.seen[-15:])
            raise AssertionError(f"{err}; the autoscaler meanwhile:\n{history}") from None


def test_helm_install_runs_the_operator_as_a_pod_under_its_own_account(
    cluster: Cluster, release: Release
) -> None:
    (deployment,) = get_json(
        cluster, "deployment", "-n", release.namespace, "-l", OPERATOR_SELECTOR
    )["items"]
    assert deployment["status"].get("readyReplicas") == 2
    names = {p["metadata"]["name"] for p in operator_pods(cluster)}
    holder = wait_for(
        lambda: (h := lease_holder(cluster)) in names and h, timeout_s=60, what="a leader"
    )
    events = cluster.audit_events()
    by_operator = audit.matching(events, user=OPERATOR_SA)
    assert by_operator, f"no request of {OPERATOR_SA} in the audit log"
    # Every request of the account came from one of the release's pods (bound tokens).
    assert {audit.pod_of(e) for e in by_operator} <= names
    assert audit.matching(
        events, user=OPERATOR_SA, verb="update", resource="leases", name=LEASE
    ) or audit.matching(events, user=OPERATOR_SA, verb="create", resource="leases", name=LEASE)
    print(f"operator pods {sorted(names)}, leader {holder}")


INVALID = [
    # (what is changed in examples/sim.yaml, the field the API server names)
    ({"prefill": {"replicas": {"min": 4, "max": 2}}}, "spec.prefill.replicas"),
    ({"engine": {"backend": "tgi", "simModel": "llama-3.1-8b"}}, "spec.engine.backend"),
    ({"decode": {"gpu": {"count": 4}, "tensorParallelSize": 3}}, "spec.decode"),
    ({"qos": {"ttft": {"p90": "1s", "p99": "2s"}, "itl": {"p90": "50ms"}}}, "spec.qos.ttft"),
    ({"prefil": {"replicas": {"min": 1}}}, "spec.prefil"),
]


@pytest.mark.parametrize(("change", "field_path"), INVALID, ids=[f for _, f in INVALID])
def test_the_api_server_refuses_an_invalid_manifest_naming_the_field(
    cluster: Cluster, release: Release, tmp_path: Path, change: dict[str, Any], field_path: str
) -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = "invalid"
    for key, value in change.items():
        current = manifest["spec"].get(key)
        manifest["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    path = tmp_path / "invalid.yaml"
    path.write_text(yaml.safe_dump(manifest))
    out = cluster.run_kubectl("apply", "-n", release.namespace, "-f", str(path), check=False)
    assert out.returncode != 0, out.stdout
    assert field_path in out.stderr, out.stderr
    assert get_isvc(cluster, release.namespace, "invalid") is None


def test_the_example_becomes_ready_with_its_printer_columns(
    cluster: Cluster, service: Service
) -> None:
    body = get_isvc(cluster, service.namespace, service.name)
    assert body is not None
    owned = children(cluster, service.namespace, service.name)
    assert len(owned) == 14, sorted(owned)
    assert all(owned_by(o, service.uid) for o in owned.values())
    for role in ("PrefillReady", "DecodeReady", "RouterReady"):
        assert (condition(body, role) or {}).get("status") == "True", role

    def row() -> list[str] | None:
        out = cluster.run_kubectl("get", "tisvc", service.name, "-n", service.namespace)
        header, line = out.stdout.splitlines()
        cells = line.split()
        # Desired sizes are the autoscaler's, written at its first tick.
        return [header, *cells] if len(cells) == 9 else None

    header, *cells = wait_for(row, timeout_s=60, what="every printer column filled")
    assert header.split() == [
        "NAME", "MODE", "READY", "PREFILL", "PREFILL-DESIRED", "DECODE", "DECODE-DESIRED",
        "URL", "AGE",
    ]  # fmt: skip
    assert cells[:8] == [
        service.name, "disaggregated", "True", "1", "1", "1", "1",
        f"http://{service.name}.{service.namespace}.svc:8000/v1",
    ]  # fmt: skip


def test_the_openai_client_gets_tokens_through_the_router_pod(
    cluster: Cluster, service: Service
) -> None:
    api = OpenAI(base_url=f"http://{router_ip(cluster, service)}:8000/v1", api_key="unused")
    assert service.model in [m.id for m in api.models.list().data]
    completion = api.completions.create(model=service.model, prompt="Hello, world", max_tokens=16)
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    stream = api.chat.completions.create(
        model=service.model,
        messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=32,
        stream=True,
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len([p for p in pieces if p]) > 1 and "".join(pieces)


def test_load_scales_each_pool_and_the_router_routes_to_the_new_pods(
    cluster: Cluster, service: Service
) -> None:
    assert pool_sizes(cluster, service) == {"prefill": 1, "decode": 1}
    arrivals = with_bursts(
        at_rate(load_trace(), LOAD_RATE_SCALE),
        every_s=BURST_EVERY_S,
        size=BURST_SIZE,
        prompt_tokens=BURST_PROMPT_TOKENS,
        output_tokens=32,
        until_s=LOAD_MAX_S,
    )
    load = Load(
        f"http://{router_ip(cluster, service)}:8000/v1",
        service.model,
        arrivals,
        max_requests=LOAD_MAX_REQUESTS,
        duration_s=LOAD_MAX_S,
    ).start()
    t0 = time.monotonic()
    decisions = Decisions(cluster, service)
    try:
        grown = decisions.wait(
            lambda s: s["prefill"] > 1 and s["decode"] > 1,
            timeout_s=LOAD_MAX_S,
            what="both pools to scale up under load",
        )
        scaled_s = time.monotonic() - t0

        def routed() -> dict[str, set[str]] | None:
            ip = router_ip(cluster, service)
            seen = router_endpoints(ip)
            ready = {
                role: {
                    f"http://{a}:8000"
                    for a in ready_ips(pool_pods(cluster, service.namespace, service.name, role))
                }
                for role in POOLS
            }
            enough = all(len(ready[r]) >= grown[r] for r in POOLS)
            return seen if enough and all(seen.get(r) == ready[r] for r in POOLS) else None

        endpoints = wait_for(routed, timeout_s=120, every_s=1, what="the router on every pod")
    finally:
        result = load.stop()
    print(f"\nscaled to {grown} after {scaled_s:.0f} s of load; router endpoints {endpoints}")
    print(f"load: {result.summary()}")
    STORY.grown = grown
    assert result.ok > 0
    status = (get_isvc(cluster, service.namespace, service.name) or {})["status"]
    events = cluster.audit_events()
    for role in POOLS:
        deployment = f"{service.name}-{role}"
        assert status["pools"][role]["lastDecision"]["toReplicas"] > 1, status["pools"][role]
        # The operator resized through the scale subresource, as its own account...
        scaled = audit.matching(
            events, user=OPERATOR_SA, verb="patch", resource="deployments", name=deployment,
            subresource="scale",
        )  # fmt: skip
        assert scaled and all(audit.code(e) == 200 for e in scaled), scaled
        # ...and never wrote the Deployment's replicas any other way.
        assert not audit.matching(
            events, user=OPERATOR_SA, verb="update", resource="deployments", name=deployment
        )
        for pod in pool_pods(cluster, service.namespace, service.name, role):
            (ref,) = pod["metadata"]["ownerReferences"]
            assert ref["kind"] == "ReplicaSet" and ref["name"].startswith(deployment)
            if pod_ready(pod):
                assert pod["spec"]["nodeName"] in cluster.info.nodes.names
                assert http_status(f"http://{pod['status']['podIP']}:8000/health") == 200
    created = audit.matching(
        events, user=RS_USER, verb="create", resource="pods", namespace=service.namespace
    )
    assert len(created) >= sum(grown.values()), "pods not created by the ReplicaSet controller"
    reasons = {
        e["reason"]
        for e in get_json(
            cluster, "events", "-n", service.namespace,
            "--field-selector", f"involvedObject.name={service.name}",
        )["items"]
    }  # fmt: skip
    assert "ScaledUp" in reasons, reasons


def test_a_pod_disruption_budget_holds_during_an_eviction(
    cluster: Cluster, service: Service
) -> None:
    """Two evictions at once from a pool of at least two ready pods: the PDB lets one go
    (``maxUnavailable: 1``) and refuses the other while the first is still draining."""
    v1 = client.CoreV1Api(cluster.api())

    def two_ready() -> tuple[str, list[dict[str, Any]]] | None:
        for role in ("decode", "prefill"):
            found = [
                p for p in pool_pods(cluster, service.namespace, service.name, role) if pod_ready(p)
            ]
            if len(found) >= 2:
                return role, found
        return None

    role, found = wait_for(two_ready, timeout_s=60, what="a pool of two ready pods")
    first, second = (p["metadata"]["name"] for p in found[:2])

    def evict(name: str) -> int:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name))
        try:
            v1.create_namespaced_pod_eviction(name, service.namespace, body, _request_timeout=30)
        except client.ApiException as err:
            return int(err.status)
        return 201

    # The disruption controller must have counted the pool's current pods first.
    wait_for(lambda: evict(first) == 201, timeout_s=60, what=f"the eviction of {first}")
    assert evict(second) == 429
    budget = get_json(cluster, "pdb", f"{service.name}-{role}", "-n", service.namespace)
    assert budget["status"]["disruptionsAllowed"] == 0, budget["status"]
    print(f"\n{role}: evicted {first}; {second} refused by the PDB while {first} drains")


@dataclass
class DeletionRecord:
    pod: str
    role: str
    cost: int
    others: dict[str, int]
    """The costs of the pool's other pods still running at that moment."""


class PodWatcher:
    """Records each pool pod's deletion cost at the moment it starts terminating."""

    def __init__(self, cluster: Cluster, svc: Service) -> None:
        self.api = client.CoreV1Api(cluster.api())
        self.svc = svc
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: list[DeletionRecord] = []
        self.stop = threading.Event()
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def _cost(self, pod: dict[str, Any]) -> int:
        return int((pod["metadata"].get("annotations") or {}).get(DELETION_COST, "0"))

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._watch_once()
            except (ProtocolError, client.ApiException, OSError):
                # The stream broke (the server ends watches): watch again; the first
                # events of a new watch restate every pod.
                time.sleep(0.5)

    def _watch_once(self) -> None:
        for event in self.watch.stream(
            self.api.list_namespaced_pod,
            self.svc.namespace,
            label_selector=f"{SERVICE_LABEL}={self.svc.name}",
            timeout_seconds=10,
            _request_timeout=20,
        ):
            pod = self.api.api_client.sanitize_for_serialization(event["object"])
            name = pod["metadata"]["name"]
            role = pod["metadata"]["labels"].get(ROLE_LABEL, "")
            was = self.pods.get(name)
            self.pods[name] = pod
            starts_terminating = pod["metadata"].get("deletionTimestamp") and not (
                was and was["metadata"].get("deletionTimestamp")
            )
            if starts_terminating and role in POOLS and was is not None:
                others = {
                    n: self._cost(p)
                    for n, p in self.pods.items()
                    if n != name
                    and p["metadata"]["labels"].get(ROLE_LABEL) == role
                    and not p["metadata"].get("deletionTimestamp")
                }
                self.deleted.append(DeletionRecord(name, role, self._cost(was), others))
            if event["type"] == "DELETED":
                self.pods.pop(name, None)
            if self.stop.is_set():
                self.watch.stop()
                return

    def __enter__(self) -> PodWatcher:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.watch.stop()
        self.thread.join(timeout=30)


def test_after_the_load_the_pools_shrink_least_loaded_first_and_no_request_fails(
    cluster: Cluster, service: Service
) -> None:
    assert STORY.grown, "the scale-up test did not run"

    def decode_settled() -> list[dict[str, Any]] | None:
        # The PDB test's eviction left a replacement pod starting: wait for it.
        found = pool_pods(cluster, service.namespace, service.name, "decode")
        ready = [p for p in found if pod_ready(p)]
        size = replicas(cluster, service.namespace, f"{service.name}-decode")
        return ready if len(ready) == len(found) == size else None

    decode = wait_for(decode_settled, timeout_s=90, every_s=1, what="the decode pool settled")
    busy = decode[0] if len(decode) > 1 else None
    busy_stop = threading.Event()
    busy_errors: list[str] = []

    def keep_busy() -> None:
        assert busy is not None
        api = OpenAI(
            base_url=f"http://{busy['status']['podIP']}:8000/v1", api_key="-", max_retries=0
        )
        deadline = time.monotonic() + 600
        while not busy_stop.is_set() and time.monotonic() < deadline:
            try:
                api.completions.create(model=service.model, prompt="busy", max_tokens=BUSY_TOKENS)
            except Exception as err:
                busy_errors.append(repr(err))
                return

    workers = [threading.Thread(target=keep_busy, daemon=True) for _ in range(BUSY_STREAMS)]
    traffic = Load(
        f"http://{router_ip(cluster, service)}:8000/v1",
        service.model,
        at_rate(load_trace(), DRAIN_RATE_SCALE),
        max_requests=400,
        duration_s=420,
        grace_s=90,
    )
    t0 = time.monotonic()
    with PodWatcher(cluster, service) as watcher:
        if busy is not None:
            for w in workers:
                w.start()
        traffic.start()
        try:
            Decisions(cluster, service).wait(
                lambda s: (
                    s == {"prefill": 1, "decode": 1}
                    and all(
                        len(pool_pods(cluster, service.namespace, service.name, r)) == 1
                        for r in POOLS
                    )
                ),
                timeout_s=420,
                what="both pools back to one pod",
            )
        finally:
            result = traffic.stop()
            busy_stop.set()
            for w in workers:
                if w.is_alive():
                    w.join(timeout=120)
    shrink_s = time.monotonic() - t0
    print(f"\npools back to 1 after {shrink_s:.0f} s; traffic meanwhile: {result.summary()}")
    for record in watcher.deleted:
        print(f"  removed {record.role} {record.pod} at cost {record.cost}; others {record.others}")
    assert result.failed == 0, result.failures[:10]
    assert result.ok > 0
    removed = {r.pod for r in watcher.deleted}
    assert len(removed) >= sum(STORY.grown.values()) - 2, watcher.deleted
    for record in watcher.deleted:
        assert all(record.cost <= c for c in record.others.values()), record
    if busy is not None:
        assert busy["metadata"]["name"] not in removed, "the busiest decode pod was removed"
        assert not busy_errors, busy_errors[:3]
    reasons = {
        e["reason"]
        for e in get_json(
            cluster, "events", "-n", service.namespace,
            "--field-selector", f"involvedObject.name={service.name}",
        )["items"]
    }  # fmt: skip
    assert "ScaledDown" in reasons, reasons


def burst_manifest(namespace: str) -> dict[str, Any]:
    """A second service whose pools run on the processless node (no processes): cheap."""
    place = {
        "nodeSelector": {"tandem.dev/e2e-node-mode": "processless"},
        "tolerations": [{"key": PROCESSLESS_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }
    pool = {"replicas": {"min": 2, "max": 2}, "gpu": {"count": 0}, "cpu": "10m", **place}
    return {
        "apiVersion": "serving.tandem.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "burst", "namespace": namespace},
        "spec": {
            "model": {"name": "burst", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"backend": "sim"},
            "prefill": pool,
            "decode": pool,
            "router": {"replicas": 1, "cpu": "10m", "memory": "128Mi"},
            "autoscaling": {"policy": "static"},
        },
    }


def test_the_leader_killed_mid_reconcile_comes_back_and_converges(
    cluster: Cluster, service: Service, tmp_path: Path
) -> None:
    manifest = burst_manifest(service.namespace)
    ns = service.namespace
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(manifest))
    rendered = cluster_render(path)
    leader = lease_holder(cluster)
    apps = client.AppsV1Api(cluster.api())
    cluster.run_kubectl("apply", "-f", str(path))

    def first_child() -> int:
        listed = apps.list_namespaced_deployment(
            ns, label_selector=f"{SERVICE_LABEL}=burst", _request_timeout=10
        )
        return len(listed.items)

    wait_for(first_child, timeout_s=60, every_s=0.05, what="the reconcile of burst to start")
    cluster.kill_container(OPERATOR_NS, leader, "operator")
    at_kill = len(children(cluster, ns, "burst"))
    STORY.killed = leader
    print(f"\nkilled the leader {leader} with {at_kill} of {len(rendered)} children written")

    def comes_back() -> bool:
        (pod,) = [p for p in operator_pods(cluster) if p["metadata"]["name"] == leader]
        (status,) = pod["status"].get("containerStatuses") or [{}]
        return bool(status.get("restartCount", 0) >= 1 and pod_ready(pod))

    wait_for(comes_back, timeout_s=120, every_s=1, what=f"{leader} restarted and ready")
    body = wait_for(
        lambda: ready_isvc(cluster, ns, "burst"),
        timeout_s=180,
        every_s=2,
        what="burst Ready after the kill",
    )
    uid = body["metadata"]["uid"]
    owned = children(cluster, ns, "burst")
    # No duplicate: exactly the children `tandem render` lists, each created once, and
    # each pool Deployment rolled out once.
    assert set(owned) == rendered
    events = cluster.audit_events()
    for kind, name in owned:
        resource = {
            "Deployment": "deployments", "Service": "services",
            "PodDisruptionBudget": "poddisruptionbudgets", "NetworkPolicy": "networkpolicies",
            "ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
        }[kind]  # fmt: skip
        mine = {"user": OPERATOR_SA, "resource": resource, "namespace": ns, "name": name}
        codes = [audit.code(e) for e in audit.matching(events, verb="create", **mine)]
        # Created once: one 201, or, for the child the kill cut mid-request, a 504 (the
        # API server finishes a create whose client went away, writes the object and
        # audits "Timeout or abort while handling" as 504); a later try meets 409.
        assert codes.count(201) <= 1 and (201 in codes or 504 in codes), (kind, name, codes)
        deletes = audit.matching(events, verb="delete", **mine)
        assert not deletes, (kind, name, "deleted by the operator")
    for role in ("prefill", "decode", "router"):
        sets = get_json(cluster, "replicasets", "-n", ns, "-l",
                        f"{SERVICE_LABEL}=burst,{ROLE_LABEL}={role}")["items"]  # fmt: skip
        assert len(sets) == 1, [s["metadata"]["name"] for s in sets]
    # No orphan: every object labelled for burst hangs off it through its owners.
    assert all(owned_by(o, uid) for o in owned.values())
    by_uid = {
        o["metadata"]["uid"]: o
        for o in get_json(
            cluster, "deployments,replicasets", "-n", ns, "-l", f"{SERVICE_LABEL}=burst"
        )["items"]
    }
    for pod in pods(cluster, ns, f"{SERVICE_LABEL}=burst"):
        (ref,) = pod["metadata"]["ownerReferences"]
        rs = by_uid[ref["uid"]]
        assert owned_by(by_uid[rs["metadata"]["ownerReferences"][0]["uid"]], uid)
    assert is_ready(get_isvc(cluster, service.namespace, service.name))


def cluster_render(path: Path) -> set[tuple[str, str]]:
    """(kind, name) of every child ``tandem render`` prints for the manifest at ``path``."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "tandem"), "render", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}


def test_helm_upgrade_changes_an_operator_setting(
    cluster: Cluster, release: Release, service: Service, tmp_path: Path
) -> None:
    before = {p["metadata"]["name"] for p in operator_pods(cluster)}
    t_upgrade = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    helm(
        cluster, "upgrade", RELEASE, str(CHART), "--namespace", release.namespace, "--reuse-values",
        "--set", "operator.metricsPort=9090", "--wait", "--timeout", "5m",
    )  # fmt: skip
    after = wait_for(
        lambda: (
            names
            if len(names := {p["metadata"]["name"] for p in operator_pods(cluster)}) == 2
            and not names & before
            else None
        ),
        timeout_s=120,
        what="the old operator pods gone",
    )
    holder = wait_for(
        lambda: (h := lease_holder(cluster)) in after and h, timeout_s=60, what="a new leader"
    )
    (pod,) = [p for p in operator_pods(cluster) if p["metadata"]["name"] == holder]
    assert "--metrics-port=9090" in pod["spec"]["containers"][0]["command"]
    ip = pod["status"]["podIP"]
    metrics = wait_for(
        lambda: "tandem_operator_leader 1.0" in (m := http_get(f"http://{ip}:9090/metrics")) and m,
        timeout_s=60,
        what="the new leader's metrics on port 9090",
    )
    assert "tandem_operator_managed_services 2.0" in metrics
    assert http_status(f"http://{ip}:8080/metrics") is None
    assert is_ready(get_isvc(cluster, service.namespace, service.name))
    # The new operators found every child in shape: they wrote none of them.
    late = [
        e
        for e in audit.matching(cluster.audit_events(), user=OPERATOR_SA)
        if audit.is_write(e)
        and e.get("requestReceivedTimestamp", "") >= t_upgrade
        and e.get("objectRef", {}).get("resource") in {r.split(".")[0] for r in CHILD_RESOURCES}
    ]
    assert not late, [(e["verb"], e["objectRef"]) for e in late[:10]]


def test_only_the_lease_holder_ever_wrote(cluster: Cluster, release: Release) -> None:
    """Over the whole run so far (install, load, scale-down, the kill, the upgrade's
    hand-over): every write of the operator's account came from the pod holding the Lease
    at that moment, and a replica that never held it wrote nothing."""
    seen = compute_leadership(
        cluster.audit_events(),
        user=OPERATOR_SA,
        lease_namespace=release.namespace,
        lease_name=LEASE,
    )
    names = {p["metadata"]["name"] for p in operator_pods(cluster)}
    print(
        f"\nwrites per pod {dict(seen.writes)}; Lease writes {dict(seen.lease_writes)}; "
        f"holders in turn {seen.holders}"
    )
    assert len(names) == 2 and sum(seen.writes.values()) > 0
    assert not seen.outside, [
        (audit.pod_of(e), e["verb"], e["objectRef"], e["requestReceivedTimestamp"])
        for e in seen.outside[:10]
    ]
    standby = names - set(seen.holders)
    assert all(seen.writes[p] == 0 for p in standby), (standby, seen.writes)


def test_the_operator_was_never_refused_by_its_rbac(cluster: Cluster, release: Release) -> None:
    refused = [e for e in audit.matching(cluster.audit_events(), user=OPERATOR_SA)
               if audit.code(e) == 403]  # fmt: skip
    assert not refused, [(e["verb"], e["objectRef"]) for e in refused[:10]]


def test_deleting_the_services_lets_the_garbage_collector_remove_every_child(
    cluster: Cluster, service: Service
) -> None:
    selector = f"{SERVICE_LABEL} in ({service.name},burst)"
    kinds = ",".join((*CHILD_RESOURCES, "replicasets.apps", "pods"))
    before = get_json(cluster, kinds, "-n", service.namespace, "-l", selector)["items"]
    assert before
    cluster.run_kubectl(
        "delete", "tisvc", service.name, "burst", "-n", service.namespace, "--wait=true",
        "--timeout=60s", timeout_s=90,
    )  # fmt: skip
    wait_for(
        lambda: not get_json(cluster, kinds, "-n", service.namespace, "-l", selector)["items"],
        timeout_s=180,
        every_s=2,
        what="every child collected",
    )
    events = cluster.audit_events()
    collected = {
        (e["objectRef"]["resource"], e["objectRef"]["name"])
        for e in audit.matching(events, user=GC_USER, verb="delete", namespace=service.namespace)
    }
    for obj in before:
        if obj["kind"] in ("Pod",):
            continue  # the ReplicaSets' pods go with them
        plural = {"PodDisruptionBudget": "poddisruptionbudgets", "NetworkPolicy":
                  "networkpolicies"}.get(obj["kind"], obj["kind"].lower() + "s")  # fmt: skip
        assert (plural, obj["metadata"]["name"]) in collected, obj["metadata"]["name"]
    assert not [
        e
        for e in audit.matching(events, user=OPERATOR_SA, verb="delete")
        if e["objectRef"].get("namespace") == service.namespace
    ]
    print(f"\nthe garbage collector removed {len(collected)} objects; the operator none")
