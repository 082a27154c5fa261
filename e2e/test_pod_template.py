"""The owned pod template on the real API server: what the server defaults into a
Deployment's pod template is no drift (else every resync would write), and what is added
by hand goes on the next apply."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from tests.factories import make_manifest

from cluster.fixtures import Cluster, cluster  # noqa: F401
from tandem.api.validate import load_inference_service
from tandem.kube import DEPLOYMENT, KubeClient, apply_object, compute_apply_patch, fetch_object
from tandem.manifests import Owner, build_children


def _deployments(namespace: str, **spec: Any) -> list[dict[str, Any]]:
    manifest = make_manifest("chat", namespace, **spec)
    isvc = load_inference_service(manifest)
    children = build_children(isvc, Owner(isvc.api_version, isvc.kind, isvc.name, "uid"))
    out = [c for c in children if c["kind"] == "Deployment"]
    for child in out:
        child["metadata"].pop("ownerReferences")  # no owner object exists here
    return out


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"backend": "sim"},
        {"model": {"name": "m", "uri": "pvc://weights/llama", "secretRef": {"name": "s"}}},
    ],
    ids=["vllm", "sim", "pvc"],
)
async def test_server_defaults_are_no_drift_and_hand_added_powers_go(
    cluster: Cluster,  # noqa: F811
    spec: dict[str, Any],
) -> None:
    ns = f"tpl-{uuid.uuid4().hex[:6]}"
    cluster.run_kubectl("create", "namespace", ns)
    # API state only: no pod may start (a vLLM pod would run a real engine, see images.py).
    cluster.run_kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", ns)
    client = await KubeClient.from_environment(kubeconfig=str(cluster.kubeconfig))
    try:
        for desired in _deployments(ns, **spec):
            name = desired["metadata"]["name"]
            await apply_object(client, desired)
            live = await fetch_object(client, DEPLOYMENT, ns, name)
            assert live is not None
            assert compute_apply_patch(desired, live) is None, (
                name,
                compute_apply_patch(desired, live),
            )
            hack = [
                {"op": "add", "path": "/spec/template/spec/hostPID", "value": True},
                {
                    "op": "add",
                    "path": "/spec/template/spec/securityContext/runAsUser",
                    "value": 0,
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/initContainers",
                    "value": [{"name": "x", "image": "busybox"}],
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/securityContext/capabilities/add",
                    "value": ["SYS_ADMIN"],
                },
            ]
            cluster.run_kubectl(
                "-n", ns, "patch", "deployment", name, "--type=json", "-p", json.dumps(hack)
            )
            applied = await apply_object(
                client, desired, await fetch_object(client, DEPLOYMENT, ns, name)
            )
            assert applied.verb == "patch"
            pod = applied.object["spec"]["template"]["spec"]
            assert not {"hostPID", "initContainers"} & set(pod)
            assert (
                "runAsUser" not in pod.get("securityContext", {})
                or pod["securityContext"]["runAsUser"] != 0
            )
            assert "add" not in pod["containers"][0]["securityContext"]["capabilities"]
            assert compute_apply_patch(desired, applied.object) is None
    finally:
        await client.close()
        cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)
