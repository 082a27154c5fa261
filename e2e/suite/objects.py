"""Reading an InferenceService and what it owns on the real API server, as an SRE would
with ``kubectl``. API I/O (kubectl and the official ``kubernetes`` client) and HTTP to
pods by pod IP.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from cluster.fixtures import Cluster

GROUP, VERSION, PLURAL = "serving.tandem.dev", "v1alpha1", "inferenceservices"
SERVICE_LABEL = "serving.tandem.dev/service"
ROLE_LABEL = "serving.tandem.dev/role"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: What an InferenceService of the sim example owns (no monitors: no Prometheus Operator).
CHILD_RESOURCES = (
    "deployments.apps",
    "services",
    "poddisruptionbudgets.policy",
    "networkpolicies.networking.k8s.io",
    "serviceaccounts",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Obj = dict[str, Any]


def get_json(cluster: Cluster, *args: str) -> Obj:
    """``kubectl get ARGS -o json``."""
    out = cluster.run_kubectl("get", *args, "-o", "json")
    loaded: Obj = json.loads(out.stdout)
    return loaded


def get_isvc(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    out = cluster.run_kubectl(
        "get", "inferenceservice", name, "-n", namespace, "-o", "json", check=False
    )
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise AssertionError(f"kubectl get inferenceservice {name}: {out.stderr}")
    loaded: Obj = json.loads(out.stdout)
    return loaded


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_ready(obj: Obj | None) -> bool:
    """``Ready=True`` for the spec the status describes."""
    cond = condition(obj, "Ready")
    if obj is None or cond is None or cond.get("status") != "True":
        return False
    status = obj.get("status") or {}
    return bool(status.get("observedGeneration") == obj["metadata"].get("generation"))


def ready_isvc(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    """The InferenceService when it is Ready (``is_ready``), else None."""
    obj = get_isvc(cluster, namespace, name)
    return obj if is_ready(obj) else None


def children(cluster: Cluster, namespace: str, service: str) -> dict[tuple[str, str], Obj]:
    """(kind, name) → object of everything labelled as ``service``'s child."""
    listed = get_json(
        cluster, ",".join(CHILD_RESOURCES), "-n", namespace, "-l", f"{SERVICE_LABEL}={service}"
    )
    return {(o["kind"], o["metadata"]["name"]): o for o in listed["items"]}


def owned_by(obj: Obj, uid: str) -> bool:
    """Whether ``obj``'s controller ownerReference names ``uid``."""
    refs = obj["metadata"].get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def pods(cluster: Cluster, namespace: str, selector: str) -> list[Obj]:
    return list(get_json(cluster, "pods", "-n", namespace, "-l", selector)["items"])


def pod_ready(pod: Obj) -> bool:
    conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def pool_pods(cluster: Cluster, namespace: str, service: str, role: str) -> list[Obj]:
    return pods(cluster, namespace, f"{SERVICE_LABEL}={service},{ROLE_LABEL}={role}")


def ready_ips(pods_: Iterable[Obj]) -> set[str]:
    return {p["status"]["podIP"] for p in pods_ if pod_ready(p) and p["status"].get("podIP")}


def replicas(cluster: Cluster, namespace: str, deployment: str) -> int:
    """A Deployment's ``spec.replicas`` (what the autoscaler set through ``scale``)."""
    got = get_json(cluster, "deployment", deployment, "-n", namespace)
    return int(got["spec"].get("replicas") or 0)


def http_get(url: str, timeout_s: float = 5.0) -> str:
    with NO_PROXY.open(url, timeout=timeout_s) as resp:
        return str(resp.read().decode())


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status at ``url``; None when nothing answers."""
    try:
        with NO_PROXY.open(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return None


def parse_router_endpoints(metrics_text: str) -> dict[str, set[str]]:
    r"""Pool role → the engine URLs a router routes to, from its ``tandem_router_inflight``.

    >>> parse_router_endpoints(
    ...     'tandem_router_inflight{endpoint="http://127.0.1.4:8000",pool="decode"} 0.0\n'
    ...     'tandem_router_inflight{endpoint="http://127.0.1.2:8000",pool="prefill"} 1.0\n')
    {'decode': {'http://127.0.1.4:8000'}, 'prefill': {'http://127.0.1.2:8000'}}
    """
    found: dict[str, set[str]] = {}
    for line in metrics_text.splitlines():
        if not line.startswith("tandem_router_inflight{"):
            continue
        labels = dict(
            part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(",")
        )
        found.setdefault(labels["pool"].strip('"'), set()).add(labels["endpoint"].strip('"'))
    return found


def router_endpoints(router_ip: str, port: int = 8000) -> dict[str, set[str]]:
    """What the router pod at ``router_ip`` routes to now."""
    return parse_router_endpoints(http_get(f"http://{router_ip}:{port}/metrics"))
