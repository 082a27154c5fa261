"""Fixture factories: InferenceService manifests built in code, not YAML blobs."""

from __future__ import annotations

import copy
from typing import Any


def make_manifest(
    name: str = "chat",
    namespace: str = "default",
    *,
    mode: str = "disaggregated",
    backend: str = "vllm",
    prefill_max: int = 8,
    decode_max: int = 8,
    policy: str = "slo",
    **spec: Any,
) -> dict[str, Any]:
    """A valid InferenceService manifest; keyword arguments override top-level spec keys."""
    body: dict[str, Any] = {
        "model": {"name": "llama", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "mode": mode,
        "engine": {"backend": backend},
        "autoscaling": {"policy": policy},
    }
    if mode == "aggregated":
        body["pool"] = {"replicas": {"min": 1, "max": prefill_max}}
    else:
        body["prefill"] = {"replicas": {"min": 1, "max": prefill_max}}
        body["decode"] = {"replicas": {"min": 1, "max": decode_max}}
    if backend == "sim":
        for role in ("prefill", "decode", "pool"):
            if role in body:
                body[role]["gpu"] = {"count": 0}
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": "serving.tandem.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def with_path(manifest: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``manifest`` with ``value`` at dotted ``path`` (``spec.prefill.cpu``)."""
    out = copy.deepcopy(manifest)
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out
