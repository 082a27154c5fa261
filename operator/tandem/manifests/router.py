"""The router: its Deployment, its OpenAI Service, and the read-only RBAC it needs. Pure.

In a cluster the router reads its pools from the InferenceService (classes, limits,
timeouts) and watches the ready pods of its pools, so it gets a ServiceAccount with
exactly ``get/list/watch`` on pods and InferenceServices in its own namespace. When a
priority class requires an API key, the Secret ``<name>-class-keys`` (one key per class
name, its keys one per line) is mounted into the router as files: the router reads its
keys there, never through the API, and its account may read no Secret.
"""

from __future__ import annotations

from typing import Any, Final

from tandem.api import GROUP, PLURAL, InferenceService
from tandem.manifests.images import TANDEM_IMAGE
from tandem.manifests.meta import (
    HTTP_PORT,
    Owner,
    child_name,
    labels,
    metadata,
    selector_labels,
    with_spec_hash,
)
from tandem.manifests.tracing import build_tracing_env

ROLE: Final = "router"
RUN_AS_UID = 10001
#: Where the class keys Secret is mounted in the router container.
CLASS_KEYS_DIR: Final = "/etc/tandem/class-keys"


def class_keys_secret(isvc: InferenceService) -> str:
    """Name of the Secret holding the API keys of the service's priority classes."""
    return f"{isvc.name}-class-keys"


def router_url(isvc: InferenceService) -> str:
    """The in-cluster OpenAI base URL of the service."""
    return f"http://{isvc.name}.{isvc.namespace}.svc:{HTTP_PORT}/v1"


def build_router_deployment(isvc: InferenceService, owner: Owner) -> dict[str, Any]:
    router = isvc.spec.router
    keyed = any(c.require_key for c in isvc.spec.qos.priority_classes)
    command = ["tandem", "router", "--host", "0.0.0.0", "--port", str(HTTP_PORT),
               "--namespace", isvc.namespace, "--service", isvc.name]  # fmt: skip
    if keyed:
        command += ["--class-keys", CLASS_KEYS_DIR]
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image or TANDEM_IMAGE,
        "command": command,
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        **({"env": env} if (env := build_tracing_env(isvc, ROLE)) else {}),
        "resources": {
            "requests": {"cpu": router.cpu, "memory": router.memory},
            "limits": {"memory": router.memory},
        },
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
        },
    }
    pod: dict[str, Any] = {
        "serviceAccountName": child_name(isvc, ROLE),
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": int(isvc.spec.router.timeouts.idle_stream) + 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    if keyed:
        container["volumeMounts"] = [
            {"name": "class-keys", "mountPath": CLASS_KEYS_DIR, "readOnly": True}
        ]
        # optional: the router starts without it, and keyed classes refuse every request
        pod["volumes"] = [
            {
                "name": "class-keys",
                "secret": {"secretName": class_keys_secret(isvc), "optional": True},
            }
        ]
    template = with_spec_hash({"metadata": {"labels": labels(isvc, ROLE)}, "spec": pod})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(isvc, owner, child_name(isvc, ROLE), ROLE),
        "spec": {
            "replicas": router.replicas,
            "selector": {"matchLabels": selector_labels(isvc, ROLE)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "template": template,
        },
    }


def build_router_service(isvc: InferenceService, owner: Owner) -> dict[str, Any]:
    """``<name>``: the OpenAI endpoint clients use."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(isvc, owner, isvc.name, ROLE),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(isvc, ROLE),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def build_router_rbac(isvc: InferenceService, owner: Owner) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding: read pods and this InferenceService."""
    name = child_name(isvc, ROLE)
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(isvc, owner, name, ROLE),
        "automountServiceAccountToken": True,
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(isvc, owner, name, ROLE),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(isvc, owner, name, ROLE),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": isvc.namespace}],
    }
    return [sa, role, binding]
