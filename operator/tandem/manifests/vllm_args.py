"""The exact ``vllm serve`` (or ``tandem engine sim``) command line of each engine role. Pure.

Roles: ``prefill`` produces KV caches (``kv_role: kv_producer``), ``decode`` consumes them
(``kv_consumer``), ``pool`` (aggregated mode) does both phases without a connector. Every
flag emitted here exists in the pinned vLLM's ``serve`` parser (a test checks it against
the flag list of that version).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tandem.api import InferenceService, PoolSpec
from tandem.api.vocab import PoolRole
from tandem.manifests.meta import HTTP_PORT
from tandem.manifests.tracing import build_tracing_args

MODELS_MOUNT = "/models"


@dataclass(frozen=True)
class ModelSource:
    """Where an engine reads weights: the ``--model`` value and what it needs mounted."""

    model: str
    revision: str | None = None
    pvc_claim: str | None = None
    load_format: str | None = None
    local: bool = False
    """A folder on the machine the engine runs on (``file://``): ``tandem up`` serves it;
    no pod has it, so the operator refuses it (:mod:`tandem.control.restrictions`)."""


def parse_model_uri(uri: str) -> ModelSource:
    """``hf://org/name@rev`` → Hub id + revision; ``pvc://claim/path`` → a mounted path;
    ``s3://bucket/path`` → streamed with the Run:ai model streamer; ``file:///abs/path``
    → that local folder.

    >>> parse_model_uri("hf://meta-llama/Llama-3.1-8B-Instruct@main").revision
    'main'
    >>> parse_model_uri("pvc://weights/llama/8b").model
    '/models/weights/llama/8b'
    >>> parse_model_uri("file:///home/me/tiny-llama/").model
    '/home/me/tiny-llama'
    """
    scheme, _, rest = uri.partition("://")
    if scheme == "hf":
        repo, _, revision = rest.partition("@")
        return ModelSource(model=repo, revision=revision or None)
    if scheme == "pvc":
        claim, _, path = rest.partition("/")
        return ModelSource(model=f"{MODELS_MOUNT}/{claim}/{path}".rstrip("/"), pvc_claim=claim)
    if scheme == "s3":
        return ModelSource(model=uri, load_format="runai_streamer")
    if scheme == "file" and rest.startswith("/"):
        return ModelSource(model=rest.rstrip("/") or "/", local=True)
    raise ValueError(f"unsupported model uri {uri!r}")


def build_kv_transfer_config(isvc: InferenceService, role: PoolRole) -> dict[str, Any] | None:
    """The ``--kv-transfer-config`` object of ``role`` (``None`` in aggregated mode)."""
    if role == "pool":
        return None
    kv = isvc.spec.engine.kv_transfer
    config: dict[str, Any] = {
        "kv_connector": kv.connector,
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
    }
    if role == "decode":
        config["kv_load_failure_policy"] = kv.load_failure_policy
    if kv.extra_config:
        config["kv_connector_extra_config"] = kv.extra_config
    return config


def _pool_flags(pool: PoolSpec) -> list[str]:
    flags = ["--tensor-parallel-size", str(pool.tp_size)]
    for flag, value in (
        ("--max-num-seqs", pool.max_num_seqs),
        ("--max-num-batched-tokens", pool.max_num_batched_tokens),
        ("--long-prefill-token-threshold", pool.long_prefill_token_threshold),
        ("--gpu-memory-utilization", pool.gpu_memory_utilization),
    ):
        if value is not None:
            flags += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return flags


def build_vllm_args(isvc: InferenceService, role: PoolRole) -> list[str]:
    """Arguments after ``vllm serve`` for ``role``, in a stable order."""
    spec = isvc.spec
    pool = spec.pools()[role]
    source = parse_model_uri(spec.model.uri)
    args = ["--model", source.model]
    if source.revision:
        args += ["--revision", source.revision]
    if source.load_format:
        args += ["--load-format", source.load_format]
    args += ["--served-model-name", spec.model.name, "--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    if spec.model.max_model_len is not None:
        args += ["--max-model-len", str(spec.model.max_model_len)]
    args += _pool_flags(pool)
    args += ["--scheduling-policy", spec.engine.scheduling_policy]
    args.append(
        "--enable-prefix-caching" if spec.engine.prefix_caching else "--disable-prefix-caching"
    )
    kv = build_kv_transfer_config(isvc, role)
    if kv is not None:
        args += ["--kv-transfer-config", json.dumps(kv, sort_keys=True, separators=(",", ":"))]
    args += ["--shutdown-timeout", f"{spec.engine.shutdown_timeout:g}"]
    args += build_tracing_args(isvc)
    return args + list(spec.engine.extra_args)


def build_sim_args(isvc: InferenceService, role: PoolRole) -> list[str]:
    """Arguments after ``tandem engine sim`` for ``role`` (the simulated CPU engine)."""
    spec = isvc.spec
    pool = spec.pools()[role]
    gpu = (pool.gpu.type or "H100").lower()
    args = [
        "--role",
        "aggregated" if role == "pool" else role,
        "--host",
        "0.0.0.0",
        "--port",
        str(HTTP_PORT),
        "--served-model-name",
        spec.model.name,
        "--model",
        spec.engine.sim_model,
        "--gpu",
        gpu,
        "--scheduling-policy",
        spec.engine.scheduling_policy,
    ]
    if spec.model.max_model_len is not None:
        args += ["--max-model-len", str(spec.model.max_model_len)]
    for flag, value in (
        ("--max-num-seqs", pool.max_num_seqs),
        ("--max-num-batched-tokens", pool.max_num_batched_tokens),
        ("--long-prefill-token-threshold", pool.long_prefill_token_threshold),
    ):
        if value is not None:
            args += [flag, str(value)]
    if role == "decode":
        args += ["--kv-load-failure-policy", spec.engine.kv_transfer.load_failure_policy]
    return args
