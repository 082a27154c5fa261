"""The Deployment of one engine pool (prefill, decode or aggregated). Pure.

vLLM pods get their exact ``vllm serve`` arguments, the NIXL side-channel host from the
pod IP, probes sized for slow weight loading, a memory-backed ``/dev/shm``, GPU requests,
and a drain before exit: a ``preStop`` hook that waits for the running sequences
(:mod:`tandem.manifests.drain`), then vLLM's own drain on SIGTERM. ``engine.backend: sim``
runs the simulated engine on CPU instead, as a non-root, read-only container.
"""

from __future__ import annotations

import math
from typing import Any

from tandem.api import InferenceService, PoolSpec
from tandem.api.vocab import PoolRole
from tandem.manifests.drain import SETTLE_S, build_drain_command, compute_grace_period_s
from tandem.manifests.images import TANDEM_IMAGE, VLLM_IMAGE
from tandem.manifests.meta import (
    HTTP_PORT,
    INITIAL_REPLICAS_ANNOTATION,
    NIXL_SIDE_CHANNEL_PORT,
    Owner,
    child_name,
    labels,
    metadata,
    selector_labels,
    with_spec_hash,
)
from tandem.manifests.tracing import build_tracing_env
from tandem.manifests.vllm_args import (
    MODELS_MOUNT,
    build_sim_args,
    build_vllm_args,
    parse_model_uri,
)

SIM_UID = 10001


def autoscaled(isvc: InferenceService) -> bool:
    """Whether the autoscaler owns the pools' ``replicas`` (every policy but ``static``)."""
    return isvc.spec.autoscaling.policy != "static"


def build_engine_deployment(isvc: InferenceService, owner: Owner, role: PoolRole) -> dict[str, Any]:
    """The ``apps/v1`` Deployment of pool ``role``; no ``replicas`` when autoscaled."""
    pool = isvc.spec.pools()[role]
    template = with_spec_hash(
        {"metadata": {"labels": labels(isvc, role)}, "spec": _pod_spec(isvc, role, pool)}
    )
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(isvc, role)},
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "revisionHistoryLimit": 3,
        "progressDeadlineSeconds": int(isvc.spec.engine.startup_timeout) + 600,
        "template": template,
    }
    if not autoscaled(isvc):
        spec = {"replicas": pool.replicas.start, **spec}
    meta = metadata(
        isvc,
        owner,
        child_name(isvc, role),
        role,
        annotations={INITIAL_REPLICAS_ANNOTATION: str(pool.replicas.start)},
    )
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def _pod_spec(isvc: InferenceService, role: PoolRole, pool: PoolSpec) -> dict[str, Any]:
    engine = isvc.spec.engine
    sim = engine.backend == "sim"
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": engine.shm_size}},
        {"name": "cache", "emptyDir": {}},
    ]
    source = parse_model_uri(isvc.spec.model.uri)
    if source.pvc_claim and not sim:
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": source.pvc_claim, "readOnly": True},
            }
        )
    spec: dict[str, Any] = {
        "containers": [_container(isvc, role, pool, sim, bool(source.pvc_claim))],
        "volumes": volumes,
        "terminationGracePeriodSeconds": compute_grace_period_s(SETTLE_S, engine.shutdown_timeout),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}
        | ({"runAsNonRoot": True, "runAsUser": SIM_UID, "fsGroup": SIM_UID} if sim else {}),
    }
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        spec["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in pool.tolerations
        ]
    if pool.affinity:
        spec["affinity"] = pool.affinity
    return spec


def _container(
    isvc: InferenceService, role: PoolRole, pool: PoolSpec, sim: bool, pvc: bool
) -> dict[str, Any]:
    engine = isvc.spec.engine
    if sim:
        command = ["tandem", "engine", "sim", *build_sim_args(isvc, role)]
        image = engine.image or TANDEM_IMAGE
    else:
        command = ["vllm", "serve", *build_vllm_args(isvc, role)]
        image = engine.image or VLLM_IMAGE
    mounts: list[dict[str, Any]] = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "cache", "mountPath": "/cache"},
    ]
    if pvc and not sim:
        mounts.append({"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True})
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "command": command,
        "ports": _ports(role, sim),
        "env": _env(isvc, role, sim),
        "resources": _resources(pool, sim),
        "volumeMounts": mounts,
        "startupProbe": _probe(
            period_s=10, failures=max(1, math.ceil(engine.startup_timeout / 10))
        ),
        "readinessProbe": _probe(period_s=5, failures=3),
        "livenessProbe": _probe(period_s=10, failures=6),
        "lifecycle": {
            "preStop": {
                "exec": {
                    "command": build_drain_command(HTTP_PORT, SETTLE_S, engine.shutdown_timeout)
                }
            }
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            # The vLLM image runs as root and writes compile caches; Tandem's image does not.
            "readOnlyRootFilesystem": sim,
        }
        | ({"runAsNonRoot": True, "runAsUser": SIM_UID} if sim else {}),
    }
    env_from = _env_from(isvc, sim)
    if env_from:
        container["envFrom"] = env_from
    return container


def _ports(role: PoolRole, sim: bool) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    if role != "pool" and not sim:
        ports.append({"name": "nixl", "containerPort": NIXL_SIDE_CHANNEL_PORT, "protocol": "TCP"})
    return ports


def _env(isvc: InferenceService, role: PoolRole, sim: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": "/cache/huggingface"}]
    if role != "pool":
        # The address a decode engine pulls KV from (the sim engine advertises it too).
        env.append(
            {
                "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
            }
        )
        if not sim:
            env.append(
                {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_PORT)}
            )
    secret = isvc.spec.model.secret_ref
    if secret is not None and not sim and isvc.spec.model.uri.startswith("hf://"):
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }
        )
    if not sim:
        env += build_tracing_env(isvc, role)
    return env


def _env_from(isvc: InferenceService, sim: bool) -> list[dict[str, Any]]:
    secret = isvc.spec.model.secret_ref
    if secret is None or sim or not isvc.spec.model.uri.startswith("s3://"):
        return []
    return [{"secretRef": {"name": secret.name}}]


def _resources(pool: PoolSpec, sim: bool) -> dict[str, Any]:
    cpu = pool.cpu or ("500m" if sim else "4")
    memory = pool.memory or ("1Gi" if sim else "32Gi")
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    limits: dict[str, Any] = {"memory": memory}
    if not sim and pool.gpu.count > 0:
        requests[pool.gpu.resource_name] = str(pool.gpu.count)
        limits[pool.gpu.resource_name] = str(pool.gpu.count)
    if sim:
        limits["cpu"] = cpu
    return {"requests": requests, "limits": limits}


def _probe(period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }
