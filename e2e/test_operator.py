"""The operator's scenarios on the real API server of ``e2e/cluster``: what the emulator
cannot show — defaulting, garbage collection, real watches, ``managedFields``.

Each test runs ``tandem operator`` as a process (as a developer runs it against a
cluster, with the admin's kubeconfig) in a namespace of its own. The pools' pods go to
the harness's processless node (no processes: everything asserted here is API state);
each service's one router pod runs.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest

from cluster.fixtures import Cluster
from cluster.layout import PROCESSLESS_TAINT
from tandem.kube import (
    CHILD_TYPES,
    DEPLOYMENT,
    INFERENCE_SERVICE,
    KubeClient,
    KubeError,
    fetch_object,
    fetch_objects,
)

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "serving.tandem.dev_inferenceservices.yaml"
T = TypeVar("T")


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float = 90.0,
    what: str = "the condition",
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value!r}")
        await asyncio.sleep(1.0)


PLACE = {
    "nodeSelector": {"tandem.dev/e2e-node-mode": "processless"},
    "tolerations": [{"key": PROCESSLESS_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
}


def _pool() -> dict[str, Any]:
    return {
        "replicas": {"min": 1, "max": 2},
        "gpu": {"count": 0},
        "cpu": "10m",
        "memory": "32Mi",
        **PLACE,
    }


def _small(name: str) -> dict[str, Any]:
    """A service whose pools run no process (sim backend, processless node)."""
    return {
        "apiVersion": "serving.tandem.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "llama", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
            "engine": {"backend": "sim"},
            "prefill": _pool(),
            "decode": _pool(),
            "router": {"cpu": "10m", "memory": "128Mi", "replicas": 1},
        },
    }


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[KubeClient]:
    cluster.run_kubectl("apply", "--server-side", "-f", str(CRD), timeout_s=60)
    cluster.run_kubectl(
        "wait", "--for=condition=Established", "crd/inferenceservices.serving.tandem.dev",
        "--timeout=60s",
    )  # fmt: skip
    client = await KubeClient.from_environment(
        kubeconfig=str(cluster.kubeconfig), user_agent="tandem-e2e"
    )
    yield client
    await client.close()


class Operators:
    def __init__(self, namespace: str, kubeconfig: Path, log_dir: Path) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.procs: list[asyncio.subprocess.Process] = []
        self.logs: list[IO[bytes]] = []

    async def start(self, identity: str = "e2e", *extra: str) -> asyncio.subprocess.Process:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = (self.log_dir / f"operator-{self.namespace}-{identity}.log").open("ab")
        self.logs.append(log)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tandem.cli",
            "operator",
            f"--kubeconfig={self.kubeconfig}",
            "--namespace",
            self.namespace,
            "--no-autoscaler",
            "--metrics-host=127.0.0.1",
            f"--metrics-port={port}",
            "--liveness=none",
            f"--identity={identity}",
            f"--lease-namespace={self.namespace}",
            "--resync-interval=10",
            "--watch-timeout=30",
            *extra,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    async def stop_all(self) -> list[int]:
        codes = []
        for proc in self.procs:
            if proc.returncode is None:
                proc.terminate()
            codes.append(await asyncio.wait_for(proc.wait(), 60))
        for log in self.logs:
            log.close()
        return codes


@pytest.fixture
async def operators(cluster: Cluster, namespace: str) -> AsyncIterator[Operators]:
    ops = Operators(namespace, cluster.kubeconfig, cluster.info.layout.logs)
    yield ops
    await ops.stop_all()


async def create(kube: KubeClient, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["namespace"] = namespace
    return await kube.request("POST", INFERENCE_SERVICE.path(namespace), body=manifest)


async def patch_spec(kube: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    await kube.request(
        "PATCH",
        INFERENCE_SERVICE.path(namespace, name),
        body={"spec": spec},
        content_type="application/merge-patch+json",
    )


async def children(kube: KubeClient, namespace: str, service: str) -> dict[tuple[str, str], Any]:
    out = {}
    for rtype in CHILD_TYPES:
        try:
            found = await fetch_objects(
                kube, rtype, namespace, f"serving.tandem.dev/service={service}"
            )
        except KubeError as err:
            if err.not_found:  # e.g. no Prometheus Operator CRDs in this cluster
                continue
            raise
        out.update({(o["kind"], o["metadata"]["name"]): o for o in found})
    return out


def tandem_write_times(obj: dict[str, Any]) -> list[str]:
    """When the operator last wrote each part of ``obj`` (from managedFields)."""
    return sorted(
        f"{m.get('subresource', '')}:{m.get('time')}"
        for m in obj["metadata"].get("managedFields") or []
        if m.get("manager", "").startswith("tandem-operator")
    )


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


async def settled(kube: KubeClient, namespace: str, name: str, count: int = 14) -> None:
    async def ready() -> bool:
        body = await fetch_object(kube, INFERENCE_SERVICE, namespace, name)
        found = await children(kube, namespace, name)
        return len(found) >= count and condition(body, "Ready") is not None

    await wait_for(ready, what="children and status")
    await asyncio.sleep(5)


async def test_create_update_resync_and_garbage_collection(
    kube: KubeClient, namespace: str, operators: Operators
) -> None:
    await operators.start()
    owner = await create(kube, namespace, _small("chat"))
    await settled(kube, namespace, "chat")
    found = await children(kube, namespace, "chat")
    for obj in found.values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == owner["metadata"]["uid"] and ref["controller"]
    body = await fetch_object(kube, INFERENCE_SERVICE, namespace, "chat")
    assert body is not None and body["status"]["observedGeneration"] == 1

    # With the API server's defaulting in play, a resync still writes nothing.
    before = {key: tandem_write_times(obj) for key, obj in found.items()}
    await asyncio.sleep(25)
    after = {
        key: tandem_write_times(obj)
        for key, obj in (await children(kube, namespace, "chat")).items()
    }
    assert after == before

    # An update touches only the affected Deployment.
    await patch_spec(kube, namespace, "chat", {"decode": {"memory": "48Mi"}})
    await asyncio.sleep(10)
    changed = {
        key
        for key, obj in (await children(kube, namespace, "chat")).items()
        if tandem_write_times(obj) != before[key]
    }
    assert changed == {("Deployment", "chat-decode")}

    # Deleting the service garbage-collects every child through its ownerReference.
    await kube.request("DELETE", INFERENCE_SERVICE.path(namespace, "chat"))

    async def gone() -> bool:
        return not await children(kube, namespace, "chat")

    await wait_for(gone, timeout_s=120, what="garbage collection of the children")


async def test_mode_switch_drift_and_replicas(
    kube: KubeClient, namespace: str, operators: Operators
) -> None:
    await operators.start()
    await create(kube, namespace, _small("chat"))
    await settled(kube, namespace, "chat")

    await kube.request("DELETE", DEPLOYMENT.path(namespace, "chat-decode"))

    async def restored() -> dict[str, Any] | None:
        return await fetch_object(kube, DEPLOYMENT, namespace, "chat-decode")

    await wait_for(restored, what="the deleted Deployment back")

    await kube.request(
        "PATCH",
        DEPLOYMENT.path(namespace, "chat-prefill", "scale"),
        body={"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )
    await asyncio.sleep(15)
    prefill = await fetch_object(kube, DEPLOYMENT, namespace, "chat-prefill")
    assert prefill is not None and prefill["spec"]["replicas"] == 3

    await kube.request(
        "PATCH",
        INFERENCE_SERVICE.path(namespace, "chat"),
        body={
            "spec": {
                "mode": "aggregated",
                "prefill": None,
                "decode": None,
                "pool": _pool(),
            }
        },
        content_type="application/merge-patch+json",
    )

    async def switched() -> bool:
        found = await children(kube, namespace, "chat")
        return ("Deployment", "chat-pool") in found and ("Deployment", "chat-prefill") not in found

    await wait_for(switched, what="the aggregated pool replacing prefill and decode")


async def test_invalid_spec_and_two_operators(
    kube: KubeClient, namespace: str, operators: Operators
) -> None:
    await operators.start("a")
    await operators.start("b")
    bad = _small("bad")
    # The API server's CEL rules refuse most invalid specs up front (e2e/test_policy.py);
    # vLLM's flag list is checked by the operator alone.
    bad["spec"]["engine"]["extraArgs"] = ["--no-such-flag"]
    await create(kube, namespace, bad)
    await create(kube, namespace, _small("good"))

    async def invalid() -> dict[str, Any] | None:
        cond = condition(await fetch_object(kube, INFERENCE_SERVICE, namespace, "bad"), "Ready")
        return cond if cond and cond["reason"] == "InvalidSpec" else None

    cond = await wait_for(invalid, what="InvalidSpec")
    assert "spec.engine.extraArgs[0]" in cond["message"], cond
    await settled(kube, namespace, "good")
    lease = await kube.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/tandem-operator"
    )
    assert lease["spec"]["holderIdentity"] in ("a", "b")
    assert await children(kube, namespace, "bad") == {}
