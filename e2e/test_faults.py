"""A small fault run on the real API server (the large one is ``bench/reconcile.py
--faults``): the operator reaches the API server through a fault-injecting proxy (10 %
of the requests answered with 5xx or 409, every watch cut after 10 s) while the
apiserver restarts and the operator is killed and stopped; every service converges,
with no orphan, no duplicate and no write storm.

The namespace has a ResourceQuota of zero pods: everything judged here is API state, so
no pod needs to run (the ReplicaSets stay empty).
"""

from __future__ import annotations

import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.factories import make_manifest

from cluster import audit
from cluster.faultproxy import FaultProxy
from cluster.fixtures import Cluster, wait_for
from cluster.kubeconfig import request_token
from suite.convergence import check, expected_children
from suite.operator import OperatorProcess

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "serving.tandem.dev_inferenceservices.yaml"
SERVICES = 8
RESYNC_S = 15
SETTLE_S = 10.0
QUIET_S = 25.0
"""Longer than a resync interval: a resync that writes would show."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def podless(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """A namespace where no pod may be created, and an account for the operator there
    (cluster-admin: this test is about faults, not permissions); (namespace, user)."""
    ns = f"faults-{uuid.uuid4().hex[:6]}"
    cluster.run_kubectl("apply", "--server-side", "-f", str(CRD), timeout_s=60)
    cluster.run_kubectl(
        "wait", "--for=condition=Established", "crd/inferenceservices.serving.tandem.dev",
        "--timeout=60s",
    )  # fmt: skip
    cluster.run_kubectl("create", "namespace", ns)
    cluster.run_kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", ns)
    cluster.run_kubectl("create", "serviceaccount", "operator", "-n", ns)
    cluster.run_kubectl(
        "create", "clusterrolebinding", ns, "--clusterrole=cluster-admin",
        f"--serviceaccount={ns}:operator",
    )  # fmt: skip
    try:
        yield ns, f"system:serviceaccount:{ns}:operator"
    finally:
        cluster.run_kubectl("delete", "clusterrolebinding", ns, check=False)
        cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_services_converge_through_faults_and_restarts(
    cluster: Cluster, podless: tuple[str, str], tmp_path: Path
) -> None:
    ns, user = podless
    names = [f"svc-{i}" for i in range(SERVICES)]
    manifests = [make_manifest(name, ns, backend="sim") for name in names]
    expected = {m["metadata"]["name"]: expected_children(m) for m in manifests}
    token = request_token(cluster.kubeconfig, ns, "operator", 3600)
    with FaultProxy(cluster.apiserver_url, cluster.ca, share=0.1, watch_cut_s=10.0) as proxy:
        operator = OperatorProcess(
            [
                f"--server={proxy.url}", f"--token={token}", f"--namespace={ns}",
                "--metrics-host=127.0.0.1", f"--metrics-port={_free_port()}",
                "--liveness=none", "--identity=faults", f"--lease-namespace={ns}",
                "--no-autoscaler", f"--resync-interval={RESYNC_S}",
            ],
            cluster.info.layout.logs / f"operator-{ns}.log",
        ).start()  # fmt: skip
        try:
            path = tmp_path / "services.json"
            path.write_text("\n".join(json.dumps(m) for m in manifests))
            cluster.run_kubectl("create", "-f", str(path))
            time.sleep(2)
            killed = operator.restart(signal.SIGKILL)
            cluster.restart("kube-apiserver", down_s=2)
            stopped = operator.restart(signal.SIGTERM)

            last = [""]

            def converged() -> bool:
                verdict = check(
                    cluster.kubectl, cluster.kubeconfig, ns, expected,
                    audit_log=cluster.audit_log, operator_user=user,
                )  # fmt: skip
                last[0] = verdict.summary()
                return verdict.converged

            try:
                wait_for(converged, timeout_s=300, every_s=3, what="every service converged")
            except AssertionError as err:
                raise AssertionError(f"{err}: {last[0]}") from None
            # The last statuses and Events of the convergence land within seconds (the
            # Deployments' conditions keep changing as the ReplicaSets are refused pods);
            # then a quiet window longer than a resync interval must hold no write.
            time.sleep(SETTLE_S)
            settled = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            time.sleep(QUIET_S)
        finally:
            operator.end()
    writes_after = [
        e
        for e in audit.matching(cluster.audit_events(), user=user)
        if audit.is_write(e)
        and e.get("requestReceivedTimestamp", "") > settled
        and e["objectRef"].get("resource") != "leases"
    ]
    stats = dict(proxy.stats)
    print(f"\nproxy: {stats}; operator exits: SIGKILL {killed}, SIGTERM {stopped}")
    assert killed == -signal.SIGKILL and stopped == 0
    assert sum(v for k, v in stats.items() if k.startswith("fault")) > 0, stats
    assert stats.get("watches cut", 0) > 0, stats
    assert not writes_after, [(e["verb"], e["objectRef"]) for e in writes_after[:10]]
