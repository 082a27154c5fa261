"""The autoscaler's configuration, computed from an InferenceService. Pure.

``qos.objective`` becomes target utilizations here: the throughput-latency trade-off the
resource declares. Running a pool hotter (``throughput``) needs fewer replicas and queues
more; running it cooler (``latency``) keeps headroom for bursts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.api import InferenceService
from tandem.api.vocab import Objective, PolicyName, PoolRole

#: Share of a replica's compute capacity (prefill tokens/s, decode batch) the policy plans
#: to use at the forecast demand, by objective.
TARGET_UTILIZATION = {"latency": 0.6, "balanced": 0.8, "throughput": 0.9}
#: Share of a decode replica's largest batch within the ITL target the policy plans to
#: fill, by objective. That batch already meets the target at its percentile, so the
#: margin here only absorbs bursts and the lag of a scale-up.
TARGET_BATCH_SHARE = {
    "latency": 0.8,
    "balanced": 0.9,
    "throughput": 1.0,
}
#: Share of the largest recent need a pool keeps through quiet periods, by objective
#: (the burst memory).
PEAK_SHARE = {
    "latency": 0.8,
    "balanced": 0.7,
    "throughput": 0.5,
}
#: Share of a replica's KV cache the policy plans to fill, by objective.
TARGET_KV_USAGE = {"latency": 0.7, "balanced": 0.8, "throughput": 0.9}

#: Before anything is measured or declared: prompt tokens/s one prefill GPU sustains (a
#: Llama-3.1-8B-class model on an H100 does several times more; start conservative).
PRIOR_PREFILL_TOKENS_PER_S_PER_GPU = 8000.0
#: KV-cache tokens one decode GPU holds when the engine does not report it.
PRIOR_KV_TOKENS_PER_GPU = 200_000.0
#: Mean output tokens per request before any request has finished.
PRIOR_OUTPUT_TOKENS = 256.0
#: Mean prompt tokens per request before any has been measured.
PRIOR_PROMPT_TOKENS = 1000.0


@dataclass(frozen=True)
class LatencyTargets:
    """TTFT and ITL targets (seconds) at their percentiles; ``None`` when not declared.

    A request's TTFT target grows with its prompt when ``qos.ttft.perPromptToken`` is
    declared: :meth:`ttft_for`.
    """

    ttft_s: float | None
    ttft_percentile: int
    itl_s: float | None
    itl_percentile: int
    ttft_per_prompt_token_s: float = 0.0
    """Seconds added to the TTFT target per prompt token (``qos.ttft.perPromptToken``)."""

    def ttft_for(self, prompt_tokens: float) -> float | None:
        """The TTFT target of a request of ``prompt_tokens``.

        >>> LatencyTargets(1.0, 90, 0.05, 90, ttft_per_prompt_token_s=5e-05).ttft_for(10_000)
        1.5
        """
        if self.ttft_s is None:
            return None
        return self.ttft_s + self.ttft_per_prompt_token_s * prompt_tokens


@dataclass(frozen=True)
class PoolConfig:
    """Bounds and declared capacity of one pool."""

    role: PoolRole
    min_replicas: int
    max_replicas: int
    initial_replicas: int
    gpus_per_replica: int = 1
    prefill_tokens_per_s: float | None = None
    """Declared prompt tokens/s per replica (``profile.prefillTokensPerS``)."""
    kv_token_capacity: float | None = None
    """Declared KV tokens per replica (``profile.kvTokenCapacity``)."""
    max_batch_at_itl: float | None = None
    """Declared largest decode batch within the ITL target (``profile.maxBatchAtItl``)."""
    max_num_seqs: int = 256
    """The engine's ``--max-num-seqs``: the decode batch can never be larger."""


@dataclass(frozen=True)
class PolicyConfig:
    """Everything ``decide`` needs besides state and observation."""

    policy: PolicyName
    objective: Objective
    targets: LatencyTargets
    class_targets: Mapping[str, LatencyTargets] = field(default_factory=dict)
    pools: Mapping[PoolRole, PoolConfig] = field(default_factory=dict)
    interval_s: float = 15.0
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    step_up: int = 4
    step_down: int = 1
    queue_waiting_per_replica: float = 5.0
    queue_kv_usage: float = 0.8
    ratio_min: float | None = None
    ratio_max: float | None = None
    cold_start_s: float = 120.0
    panic_threshold: float = 2.0
    """Demand over current capacity that triggers panic mode (Knative's 200%)."""
    peak_half_life_s: float = 1800.0
    """Half-life of the burst memory (:func:`~tandem.policy.stabilize.remember_peak`);
    0 turns it off."""
    panic_window_s: float = 60.0
    """How long panic mode holds scale-downs after the last panic tick."""

    @property
    def utilization(self) -> float:
        return TARGET_UTILIZATION[self.objective]

    @property
    def peak_share(self) -> float:
        return PEAK_SHARE[self.objective]

    @property
    def batch_share(self) -> float:
        return TARGET_BATCH_SHARE[self.objective]

    @property
    def kv_usage_target(self) -> float:
        return TARGET_KV_USAGE[self.objective]


def compute_policy_config(isvc: InferenceService) -> PolicyConfig:
    """The policy configuration an InferenceService declares."""
    spec = isvc.spec
    auto, qos = spec.autoscaling, spec.qos
    pools: dict[PoolRole, PoolConfig] = {}
    for role, pool in spec.pools().items():
        profile = pool.profile
        gpus = max(pool.gpu.count, 1)
        pools[role] = PoolConfig(
            role=role,
            min_replicas=pool.replicas.min,
            max_replicas=pool.replicas.max,
            initial_replicas=pool.replicas.start,
            gpus_per_replica=gpus,
            prefill_tokens_per_s=profile.prefill_tokens_per_s if profile else None,
            kv_token_capacity=float(profile.kv_token_capacity)
            if profile and profile.kv_token_capacity
            else None,
            max_batch_at_itl=float(profile.max_batch_at_itl)
            if profile and profile.max_batch_at_itl
            else None,
            max_num_seqs=pool.max_num_seqs or 256,
        )
    classes = {
        c.name: LatencyTargets(
            ttft_s=(c.ttft or qos.ttft).seconds,
            ttft_percentile=(c.ttft or qos.ttft).percentile,
            itl_s=(c.itl or qos.itl).seconds,
            itl_percentile=(c.itl or qos.itl).percentile,
            ttft_per_prompt_token_s=(c.ttft or qos.ttft).per_prompt_token_s,
        )
        for c in qos.priority_classes
    }
    ratio = auto.prefill_decode_ratio
    return PolicyConfig(
        policy=auto.policy,
        objective=qos.objective,
        targets=LatencyTargets(
            qos.ttft.seconds,
            qos.ttft.percentile,
            qos.itl.seconds,
            qos.itl.percentile,
            ttft_per_prompt_token_s=qos.ttft.per_prompt_token_s,
        ),
        class_targets=classes,
        pools=pools,
        interval_s=auto.interval,
        scale_up_window_s=auto.scale_up_stabilization,
        scale_down_window_s=auto.scale_down_stabilization,
        step_up=auto.max_step.up,
        step_down=auto.max_step.down,
        queue_waiting_per_replica=auto.queue.waiting_per_replica,
        queue_kv_usage=auto.queue.kv_usage,
        ratio_min=ratio.min if ratio else None,
        ratio_max=ratio.max if ratio else None,
        cold_start_s=auto.cold_start,
        peak_half_life_s=auto.burst_memory,
    )
