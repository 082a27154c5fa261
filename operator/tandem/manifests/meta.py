"""Names, labels, owner references and the spec hash shared by every builder. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tandem.api import InferenceService
from tandem.api.vocab import POOL_ROLES, Component

#: Label keys Tandem sets on every child (and selects pods by).
SERVICE_LABEL = "serving.tandem.dev/service"
ROLE_LABEL = "serving.tandem.dev/role"
SPEC_HASH_ANNOTATION = "serving.tandem.dev/spec-hash"
INITIAL_REPLICAS_ANNOTATION = "serving.tandem.dev/initial-replicas"
#: Labels the chart puts on operator pods; engines accept metrics scrapes from them.
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "tandem-operator"}
ENGINE_ROLES = POOL_ROLES
HTTP_PORT = 8000
NIXL_SIDE_CHANNEL_PORT = 5600


@dataclass(frozen=True)
class Owner:
    """The object that owns the children (the InferenceService), for ownerReferences."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def child_name(isvc: InferenceService, role: Component) -> str:
    """``<service>-<role>``: the name of a pool's (or the router's) objects."""
    return f"{isvc.name}-{role}"


def selector_labels(isvc: InferenceService, role: Component) -> dict[str, str]:
    """The labels a child's pods are selected by; stable for the resource's life."""
    return {SERVICE_LABEL: isvc.name, ROLE_LABEL: role}


def labels(isvc: InferenceService, role: Component) -> dict[str, str]:
    """Standard ``app.kubernetes.io/*`` labels plus the selector labels."""

    return {
        "app.kubernetes.io/name": "tandem",
        "app.kubernetes.io/instance": isvc.name,
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/part-of": "tandem",
        "app.kubernetes.io/managed-by": "tandem",
        **selector_labels(isvc, role),
    }


def metadata(
    isvc: InferenceService, owner: Owner, name: str, role: Component, **extra: Any
) -> dict[str, Any]:
    """``metadata`` of a child: name, namespace, labels, the controller ownerReference."""
    return {
        "name": name,
        "namespace": isvc.namespace,
        "labels": labels(isvc, role),
        "ownerReferences": [owner.reference()],
        **extra,
    }


def compute_spec_hash(template: dict[str, Any]) -> str:
    """A short hash of a pod template, so any change to it rolls the pods.

    >>> compute_spec_hash({"a": 1}) == compute_spec_hash({"a": 1})
    True
    """
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_spec_hash(template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with its hash stamped into the pod annotations."""
    meta = template.setdefault("metadata", {})
    meta.setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = compute_spec_hash(template)
    return template
