"""Semantic rules over a parsed InferenceService: the cross-field checks. Pure.

Each rule that the CRD can express is also a CEL rule on the model (the API server
enforces it); the rest (owned vLLM flags, unknown flags) only live here. Every rule
returns :class:`Problem` values naming the field path, what was given and what would
be valid, so one run of ``tandem validate`` lists everything to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from tandem.api.flags import OWNED_FLAGS
from tandem.api.spec import InferenceServiceSpec, PoolSpec

ProblemKind = Literal["schema", "rule", "limit"]
"""Where a check lives besides ``tandem validate``: ``schema``, in the CRD's OpenAPI
schema; ``rule``, a cross-field rule (CEL on the CRD where it can be written,
:data:`OPERATOR_ONLY_RULES` otherwise); ``limit``, a bound the API server cannot express
(free-form depth and size, the spec's size), checked here and by the operator."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest, at a field path such as ``spec.prefill.replicas``."""

    path: str
    message: str
    kind: ProblemKind = "rule"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


#: Rules with no CEL twin on the CRD: the API server accepts what breaks them, and the
#: operator reports it on the resource (``Ready=False``, ``InvalidSpec``). Each entry is
#: a phrase every such problem's message contains.
OPERATOR_ONLY_RULES: dict[str, str] = {
    "is not a flag of the pinned `vllm serve`": "the flag list of the pinned vLLM (hundreds "
    "of flags) is checked here, not in CEL",
}


def check_spec(spec: InferenceServiceSpec, known_flags: frozenset[str]) -> list[Problem]:
    """Every semantic problem of ``spec``; ``known_flags`` is vLLM's serve flag list."""
    return [
        *_check_mode(spec),
        *_check_pools(spec),
        *_check_extra_args(spec.engine.extra_args, known_flags),
        *_check_qos(spec),
        *_check_autoscaling(spec),
    ]


def _check_mode(spec: InferenceServiceSpec) -> Iterator[Problem]:
    if spec.mode == "aggregated":
        for role in ("prefill", "decode"):
            if getattr(spec, role) is not None:
                yield Problem(
                    f"spec.{role}",
                    f"not allowed with mode 'aggregated'; describe the single pool under "
                    f"spec.pool, or set mode 'disaggregated' to keep spec.{role}",
                )
    elif spec.pool is not None:
        yield Problem(
            "spec.pool",
            "only used with mode 'aggregated'; in mode 'disaggregated' describe "
            "spec.prefill and spec.decode",
        )


def _check_pools(spec: InferenceServiceSpec) -> Iterator[Problem]:
    for role, pool in spec.pools().items():
        yield from _check_pool(f"spec.{role}", pool, spec)


def _check_pool(path: str, pool: PoolSpec, spec: InferenceServiceSpec) -> Iterator[Problem]:
    bounds = pool.replicas
    if bounds.min > bounds.max:
        yield Problem(f"{path}.replicas", f"min ({bounds.min}) must be <= max ({bounds.max})")
    if bounds.initial is not None and not bounds.min <= bounds.initial <= bounds.max:
        yield Problem(
            f"{path}.replicas.initial",
            f"{bounds.initial} is outside [min, max] = [{bounds.min}, {bounds.max}]",
        )
    tp = pool.tensor_parallel_size
    if tp is not None and pool.gpu.count > 0 and pool.gpu.count % tp != 0:
        divisors = [d for d in range(1, pool.gpu.count + 1) if pool.gpu.count % d == 0]
        yield Problem(
            f"{path}.tensorParallelSize",
            f"{tp} does not divide gpu.count ({pool.gpu.count}); valid: {divisors}",
        )
    threshold, max_len = pool.long_prefill_token_threshold, spec.model.max_model_len
    if threshold and max_len is not None and threshold > max_len:
        yield Problem(
            f"{path}.longPrefillTokenThreshold",
            f"{threshold} is greater than spec.model.maxModelLen ({max_len}), which vLLM "
            f"refuses; use 0 (no cap) to {max_len}",
        )
    resource = pool.gpu.resource_name
    if resource.startswith("kubernetes.io/") or ".kubernetes.io/" in resource:
        yield Problem(
            f"{path}.gpu.resourceName",
            f"{resource!r} is in the kubernetes.io domain; use the device plugin's extended "
            "resource, e.g. nvidia.com/gpu or amd.com/gpu",
        )
    if spec.engine.backend == "vllm" and pool.gpu.count == 0:
        yield Problem(
            f"{path}.gpu.count",
            "0 GPUs cannot run the vllm backend; use gpu.count >= 1 or engine.backend 'sim'",
        )


def _check_extra_args(args: list[str], known_flags: frozenset[str]) -> Iterator[Problem]:
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        flag = arg.split("=", 1)[0]
        root = flag.split(".", 1)[0]  # --kv-transfer-config.kv_connector is still owned
        if root in OWNED_FLAGS:
            yield Problem(
                f"spec.engine.extraArgs[{i}]",
                f"{flag} is set by Tandem; use {OWNED_FLAGS[root]} instead",
            )
        elif known_flags and root not in known_flags:
            yield Problem(
                f"spec.engine.extraArgs[{i}]",
                f"{flag} is not a flag of the pinned `vllm serve`",
            )


def _check_qos(spec: InferenceServiceSpec) -> Iterator[Problem]:
    names = [c.name for c in spec.qos.priority_classes]
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            yield Problem(f"spec.qos.priorityClasses[{i}].name", f"duplicate class {name!r}")
        seen.add(name)
    default = spec.qos.default_class
    if default is not None and default not in seen:
        valid = ", ".join(names) or "(no classes declared)"
        yield Problem("spec.qos.defaultClass", f"{default!r} is not a class; valid: {valid}")
    if spec.engine.scheduling_policy == "fcfs" and any(
        c.priority != 0 for c in spec.qos.priority_classes
    ):
        yield Problem(
            "spec.engine.schedulingPolicy",
            "priority classes with non-zero priority need schedulingPolicy 'priority'",
        )


def _check_autoscaling(spec: InferenceServiceSpec) -> Iterator[Problem]:
    auto = spec.autoscaling
    if auto.metrics.source == "prometheus" and auto.metrics.url is None:
        yield Problem(
            "spec.autoscaling.metrics.url",
            "required when source is 'prometheus' (e.g. http://prometheus.monitoring:9090)",
        )
    ratio = auto.prefill_decode_ratio
    if ratio is not None:
        if spec.mode == "aggregated":
            yield Problem(
                "spec.autoscaling.prefillDecodeRatio", "only meaningful in disaggregated mode"
            )
        if ratio.min is not None and ratio.max is not None and ratio.min > ratio.max:
            yield Problem(
                "spec.autoscaling.prefillDecodeRatio",
                f"min ({ratio.min}) must be <= max ({ratio.max})",
            )
