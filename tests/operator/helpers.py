"""Helpers of the operator component tests: reading children, simulating controllers."""

from __future__ import annotations

from typing import Any

from tandem.kube import CHILD_TYPES
from tests.support import Emulator
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator

ISVC = "serving.tandem.dev/v1alpha1/inferenceservices"
ISVCS = "/apis/serving.tandem.dev/v1alpha1/namespaces/{ns}/inferenceservices"
DEPLOY = "apps/v1/deployments"


def disaggregated_children(name: str) -> set[tuple[str, str]]:
    """(kind, name) of every child of a disaggregated service without monitors."""
    router = f"{name}-router"
    return {
        ("ServiceAccount", router),
        ("Role", router),
        ("RoleBinding", router),
        ("Deployment", f"{name}-prefill"),
        ("Deployment", f"{name}-decode"),
        ("Deployment", router),
        ("Service", name),
        ("Service", f"{name}-prefill"),
        ("Service", f"{name}-decode"),
        ("PodDisruptionBudget", f"{name}-prefill"),
        ("PodDisruptionBudget", f"{name}-decode"),
        ("PodDisruptionBudget", router),
        ("NetworkPolicy", f"{name}-engines"),
        ("NetworkPolicy", router),
    }


def children(
    k: Emulator, namespace: str = "default", service: str | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every stored object of a child kind, by (kind, name); only one service's if given."""
    out = {}
    for rtype in CHILD_TYPES:
        for obj in k.list(f"{rtype.api_version}/{rtype.plural}", namespace):
            labels = obj["metadata"].get("labels") or {}
            if service is None or labels.get("serving.tandem.dev/service") == service:
                out[obj["kind"], obj["metadata"]["name"]] = obj
    return out


def isvc(k: Emulator, name: str, namespace: str = "default") -> dict[str, Any]:
    found = k.fetch(ISVC, namespace, name)
    assert found is not None, f"InferenceService {namespace}/{name} is gone"
    return found


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


async def create(api: Api, manifest: dict[str, Any]) -> dict[str, Any]:
    ns = manifest["metadata"].get("namespace", "default")
    status, body = await api.create(ISVCS.format(ns=ns), manifest)
    assert status == 201, body
    return dict(body)


async def patch_spec(
    api: Api, name: str, spec: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    status, body = await api.patch(f"{ISVCS.format(ns=namespace)}/{name}", {"spec": spec})
    assert status == 200, body
    return dict(body)


def make_available(
    k: Emulator, name: str, namespace: str = "default", ready: int | None = None
) -> None:
    """Do what the Deployment controller would: observe the generation, report pods."""
    obj = k.fetch(DEPLOY, namespace, name)
    assert obj is not None, name
    replicas = obj["spec"].get("replicas", 1)
    ready = replicas if ready is None else ready
    available = "True" if ready >= 1 else "False"
    k.patch_object(
        DEPLOY,
        namespace,
        name,
        {
            "status": {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": replicas,
                "readyReplicas": ready,
                "updatedReplicas": replicas,
                "availableReplicas": ready,
                "conditions": [
                    {
                        "type": "Available",
                        "status": available,
                        "reason": "MinimumReplicasAvailable"
                        if ready
                        else "MinimumReplicasUnavailable",
                        "message": "Deployment has minimum availability."
                        if ready
                        else "Deployment does not have minimum availability.",
                    }
                ],
            }
        },
        subresource="status",
    )


def resync(op: RunningOperator) -> None:
    """Queue every known service again (what the periodic resync does)."""
    runtime, loop = op.runtime, op.loop
    assert runtime is not None and loop is not None

    def queue_all() -> None:
        for key in list(runtime.services):
            runtime.queue.add(key)

    loop.call_soon_threadsafe(queue_all)


def writes_by(k: Emulator, op: RunningOperator, since: int = 0) -> list[str]:
    """``METHOD path`` of the successful writes ``op`` made after ``since``."""
    return [f"{e.method} {e.path}" for e in k.writes(since, agent=op.user_agent)]


def child_writes(k: Emulator, op: RunningOperator, since: int = 0) -> list[str]:
    """Like :func:`writes_by`, without Events (which accompany every child write)."""
    return [w for w in writes_by(k, op, since) if "/events" not in w]
