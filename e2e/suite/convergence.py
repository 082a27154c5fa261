"""Has the operator converged on a namespace of InferenceServices? Reads the API server
(``kubectl``) and the audit log; the judging itself (``judge``) is pure.

Converged means, for every InferenceService: exactly the children the builders make
(``tandem.manifests.build_children``, by kind and name), each with a controller
ownerReference to that service, and a status for its current generation. And, for the
namespace: no orphan (an object labelled as some service's child whose owner is not a
live service) and no duplicate (a child the operator created more than once: the audit
log's successful creates per object).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import audit
from suite.objects import CHILD_RESOURCES, SERVICE_LABEL
from tandem.api.validate import load_inference_service
from tandem.manifests import Owner, build_children

#: Audit ``objectRef.resource`` of each child kind.
RESOURCE_OF_KIND = {
    "Deployment": "deployments",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}

Obj = dict[str, Any]
Key = tuple[str, str]


def expected_children(manifest: Mapping[str, Any]) -> set[Key]:
    """(kind, name) of every child the builders make for ``manifest``.

    >>> from tests.factories import make_manifest
    >>> sorted(k for k, _ in expected_children(make_manifest("chat", backend="sim")))[:3]
    ['Deployment', 'Deployment', 'Deployment']
    >>> len(expected_children(make_manifest("chat")))
    14
    """
    isvc = load_inference_service(dict(manifest))
    owner = Owner(isvc.api_version, isvc.kind, isvc.name, "uid")
    return {(c["kind"], c["metadata"]["name"]) for c in build_children(isvc, owner)}


@dataclass
class Verdict:
    """What is still wrong; ``converged`` when nothing is."""

    missing: dict[str, set[Key]] = field(default_factory=dict)
    extra: dict[str, set[Key]] = field(default_factory=dict)
    wrong_owner: list[Key] = field(default_factory=list)
    orphans: list[Key] = field(default_factory=list)
    stale_status: list[str] = field(default_factory=list)
    duplicates: dict[Key, int] = field(default_factory=dict)

    @property
    def converged(self) -> bool:
        return not (
            self.missing
            or self.extra
            or self.wrong_owner
            or self.orphans
            or self.stale_status
            or self.duplicates
        )

    def summary(self) -> str:
        if self.converged:
            return "converged"
        parts = [
            f"{len(self.missing)} services missing children",
            f"{len(self.extra)} with extra children",
            f"{len(self.wrong_owner)} children owned wrongly",
            f"{len(self.orphans)} orphans",
            f"{len(self.stale_status)} statuses behind",
            f"{len(self.duplicates)} children created more than once",
        ]
        return "; ".join(p for p in parts if not p.startswith("0 "))


def _controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def judge(
    services: Iterable[Obj],
    expected: Mapping[str, set[Key]],
    children: Iterable[Obj],
    creates: Mapping[Key, int] | None = None,
) -> Verdict:
    """Compare live ``services`` and labelled ``children`` with ``expected`` (service name
    → its children); ``creates``: successful creates per (kind, name), from the audit log.

    >>> svc = {"metadata": {"name": "a", "uid": "u", "generation": 1},
    ...        "status": {"observedGeneration": 1}}
    >>> def child(kind, name, uid="u", service="a"):
    ...     return {"kind": kind, "metadata": {"name": name, "labels": {SERVICE_LABEL: service},
    ...             "ownerReferences": [{"controller": True, "uid": uid}]}}
    >>> judge([svc], {"a": {("Service", "a")}}, [child("Service", "a")]).converged
    True
    >>> v = judge([svc], {"a": {("Service", "a")}}, [child("Service", "a"),
    ...           child("Service", "b", uid="gone", service="b")], {("Service", "a"): 2})
    >>> v.orphans, v.duplicates
    ([('Service', 'b')], {('Service', 'a'): 2})
    """
    verdict = Verdict()
    live = {s["metadata"]["name"]: s for s in services}
    uids = {str(s["metadata"]["uid"]): name for name, s in live.items()}
    present: dict[str, set[Key]] = {}
    for obj in children:
        key = (str(obj["kind"]), str(obj["metadata"]["name"]))
        service = (obj["metadata"].get("labels") or {}).get(SERVICE_LABEL, "")
        owner = _controller_uid(obj)
        if owner not in uids:
            verdict.orphans.append(key)
            continue
        if uids[owner] != service:
            verdict.wrong_owner.append(key)
        present.setdefault(service, set()).add(key)
    for name, want in expected.items():
        if name not in live:
            continue
        have = present.get(name, set())
        if want - have:
            verdict.missing[name] = want - have
        if have - want:
            verdict.extra[name] = have - want
        body = live[name]
        observed = (body.get("status") or {}).get("observedGeneration")
        if observed != body["metadata"].get("generation"):
            verdict.stale_status.append(name)
    verdict.duplicates = {k: n for k, n in (creates or {}).items() if n > 1}
    return verdict


def successful_creates(events: Iterable[audit.Event], user: str, namespace: str) -> Counter[Key]:
    """(kind, name) → creates of ``user`` in ``namespace`` that the API server stored."""
    kind_of = {r: k for k, r in RESOURCE_OF_KIND.items()}
    out: Counter[Key] = Counter()
    for e in events:
        ref = e.get("objectRef", {})
        if (
            e.get("verb") == "create"
            and audit.username(e) == user
            and ref.get("namespace") == namespace
            and ref.get("resource") in kind_of
            and not ref.get("subresource")
            and audit.code(e) == 201
        ):
            out[(kind_of[ref["resource"]], str(ref.get("name", "")))] += 1
    return out


def kubectl_json(kubectl: Path, kubeconfig: Path, *args: str) -> Obj:
    out = subprocess.run(
        [str(kubectl), *args, "-o", "json"],
        # HOME kept: without it kubectl caches discovery under ./.kube.
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    loaded: Obj = json.loads(out.stdout)
    return loaded


def check(
    kubectl: Path,
    kubeconfig: Path,
    namespace: str,
    expected: Mapping[str, set[Key]],
    *,
    audit_log: Path | None = None,
    operator_user: str = "",
) -> Verdict:
    """Read the namespace (and the audit log, for duplicates) and ``judge`` it."""
    services = kubectl_json(kubectl, kubeconfig, "get", "inferenceservices", "-n", namespace)
    children = kubectl_json(
        kubectl, kubeconfig, "get", ",".join(CHILD_RESOURCES), "-n", namespace, "-l",
        SERVICE_LABEL,
    )  # fmt: skip
    creates = None
    if audit_log is not None:
        creates = successful_creates(audit.read_events(audit_log), operator_user, namespace)
    return judge(services["items"], expected, children["items"], creates)
