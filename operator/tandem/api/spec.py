"""The ``InferenceService`` spec as pydantic v2 models: the single source of truth. Pure.

The CRD in ``crds/`` is generated from these models (:mod:`tandem.api.crd`); the field
descriptions below become ``kubectl explain`` text. Durations are seconds (see
:mod:`tandem.api.durations`), token counts are tokens, and rates are per second.
Cross-field rules are written twice on purpose: as CEL on the model (the API server
enforces them) and in :mod:`tandem.api.rules` (``tandem validate`` and the operator
report every broken rule with its field path).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tandem.api.base import DNS_LABEL_PATTERN, FreeForm, Model, Quantity, cel
from tandem.api.durations import Duration
from tandem.api.vocab import Mode, Objective, PolicyName, PoolRole

#: ``hf://org/name[@revision]``, ``pvc://claim/path`` or ``s3://bucket/path``.
MODEL_URI_PATTERN = (
    r"^(hf://[A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]+(@[-A-Za-z0-9_./]+)?"
    r"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^\s]*)?"
    r"|s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/[^\s]*)?)$"
)

KvConnector = Literal["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector", "MultiConnector"]
GpuType = Literal["H100", "H200", "A100", "L40S"]


class SecretRef(Model):
    """A Secret holding credentials for the model source, exposed to engines as env only."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, description="Secret name in the same namespace.")
    key: str = Field(
        default="token",
        description="Key holding the Hugging Face token (hf:// sources). For s3:// sources "
        "every key of the Secret becomes an environment variable (AWS_ACCESS_KEY_ID, ...).",
    )


class ModelSpec(Model):
    """What is served: its OpenAI model name, where the weights come from, its context."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.:/]*$",
        description="Served model name: the `model` clients put in their requests.",
    )
    uri: str = Field(
        pattern=MODEL_URI_PATTERN,
        description="Weights: hf://org/name[@revision], pvc://claim/path or s3://bucket/path.",
    )
    secret_ref: SecretRef | None = Field(default=None, description="Credentials for the source.")
    max_model_len: int | None = Field(
        default=None, ge=16, le=2_097_152, description="Context length in tokens (vLLM default)."
    )


class KvTransferSpec(Model):
    """How prefill hands KV caches to decode (vLLM ``--kv-transfer-config``)."""

    connector: KvConnector = Field(default="NixlConnector", description="vLLM KV connector.")
    extra_config: FreeForm = Field(
        default_factory=dict, description="Passed as kv_connector_extra_config, verbatim."
    )
    load_failure_policy: Literal["fail", "recompute"] = Field(
        default="fail",
        description="What a decode engine does when pulling KV fails: fail the request, "
        "or prefill it locally.",
    )


class EngineSpec(Model):
    """The inference engine every pool runs."""

    backend: Literal["vllm", "sim"] = Field(
        default="vllm",
        description="vllm: the GPU engine. sim: Tandem's simulated vLLM-compatible engine "
        "(CPU only), for clusters without GPUs.",
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        description="Container image; defaults to the pinned vLLM image (vllm) or Tandem's "
        "image (sim).",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="fcfs", description="vLLM --scheduling-policy (priority: lower value first)."
    )
    prefix_caching: bool = Field(default=True, description="vLLM automatic prefix caching.")
    kv_transfer: KvTransferSpec = Field(default_factory=KvTransferSpec)
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Extra `vllm serve` arguments. Flags Tandem sets from other fields are "
        "rejected with the field to use instead.",
    )
    shutdown_timeout: Duration = Field(
        default=30.0,
        le=3600,
        description="How long an engine drains running requests on SIGTERM (vLLM "
        "--shutdown-timeout).",
    )
    startup_timeout: Duration = Field(
        default=1800.0,
        ge=60,
        le=21600,
        description="How long weight loading may take before the pod is restarted.",
    )
    shm_size: Quantity = Field(default="8Gi", description="Size of the memory-backed /dev/shm.")
    sim_model: str = Field(
        default="llama-3.1-8b",
        pattern=r"^[a-z0-9][-a-z0-9.]*$",
        description="Model preset the sim backend's cost model uses (llama-3.1-8b, "
        "llama-3.1-70b, llama-2-70b).",
    )


class ReplicaBounds(Model):
    """Replica bounds of one pool; the autoscaler always stays within them."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            ("self.min <= self.max", "replicas.min must be <= replicas.max"),
            (
                "!has(self.initial) || (self.min <= self.initial && self.initial <= self.max)",
                "replicas.initial must be within [min, max]",
            ),
        )
    }

    min: int = Field(default=1, ge=0, le=1000, description="Fewest replicas.")
    max: int = Field(default=4, ge=1, le=1000, description="Most replicas.")
    initial: int | None = Field(
        default=None, ge=0, le=1000, description="Replicas at creation (default: min)."
    )

    @property
    def start(self) -> int:
        """Replicas a new pool starts with."""
        return self.min if self.initial is None else self.initial


class GpuSpec(Model):
    """GPUs of one replica."""

    count: int = Field(default=1, ge=0, le=64, description="GPUs per replica.")
    type: GpuType | None = Field(
        default=None,
        description="GPU model, used by the cost model (sim backend, capacity estimates). "
        "Schedule onto it with nodeSelector.",
    )
    resource_name: str = Field(
        default="nvidia.com/gpu", description="Extended resource name of the device plugin."
    )


class PoolProfile(Model):
    """Measured capacity of one replica; the autoscaler learns it online when absent."""

    prefill_tokens_per_s: float | None = Field(
        default=None, gt=0, description="Prompt tokens per second one replica prefills."
    )
    kv_token_capacity: int | None = Field(
        default=None, gt=0, description="KV-cache tokens one replica holds."
    )
    max_batch_at_itl: int | None = Field(
        default=None,
        gt=0,
        description="Largest decode batch that keeps inter-token latency within target.",
    )


class Toleration(Model):
    """A Kubernetes toleration."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class PoolSpec(Model):
    """One engine pool (prefill, decode, or the single aggregated pool)."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "!has(self.tensorParallelSize) || !has(self.gpu) || !has(self.gpu.count) || "
                "self.gpu.count == 0 || self.gpu.count % self.tensorParallelSize == 0",
                "tensorParallelSize must divide gpu.count",
            ),
        )
    }

    replicas: ReplicaBounds = Field(default_factory=ReplicaBounds)
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    cpu: Quantity | None = Field(default=None, description="CPU request per replica.")
    memory: Quantity | None = Field(default=None, description="Memory per replica.")
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="vLLM --tensor-parallel-size (default gpu.count)."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="--max-num-seqs.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=16, le=1_048_576, description="--max-num-batched-tokens."
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="--gpu-memory-utilization (fraction of GPU memory)."
    )
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: FreeForm | None = Field(default=None, description="Pod affinity, verbatim.")
    profile: PoolProfile | None = None

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size: explicit, or one shard per GPU."""
        return self.tensor_parallel_size or max(self.gpu.count, 1)


class RouterTimeouts(Model):
    """Router timeouts; each ends a request cleanly instead of letting it hang."""

    connect: Duration = Field(default=5.0, gt=0, description="Connecting to an engine.")
    prefill: Duration = Field(default=60.0, gt=0, description="The whole prefill leg.")
    first_token: Duration = Field(
        default=120.0, gt=0, description="From the decode request to its first byte."
    )
    idle_stream: Duration = Field(
        default=60.0, gt=0, description="Longest silence inside a streaming response."
    )


class RouterSpec(Model):
    """The OpenAI-compatible router in front of the pools."""

    replicas: int = Field(default=2, ge=1, le=100)
    image: str | None = Field(default=None, min_length=1, description="Default: Tandem's image.")
    cpu: Quantity = Field(default="1", description="CPU request per router replica.")
    memory: Quantity = Field(default="512Mi", description="Memory per router replica.")
    max_inflight: int = Field(
        default=1024, ge=1, le=1_000_000, description="In-flight requests per router replica."
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=1 << 30, description="Largest request body."
    )
    timeouts: RouterTimeouts = Field(default_factory=RouterTimeouts)
    priority_header: str = Field(
        default="x-tandem-priority-class",
        pattern=r"^[A-Za-z0-9-]+$",
        description="Request header naming the priority class.",
    )
    short_prompt_tokens: int = Field(
        default=0,
        ge=0,
        description="Prompts shorter than this skip the prefill pool (0: never skip).",
    )


class LatencyTarget(Model):
    """A latency target at one percentile, e.g. ``{p90: 800ms}``. Exactly one is set."""

    model_config = Model.model_config | {
        "json_schema_extra": {
            **cel(
                (
                    "[has(self.p50), has(self.p90), has(self.p95), has(self.p99)]"
                    ".filter(x, x).size() == 1",
                    "set exactly one percentile (p50, p90, p95 or p99)",
                )
            ),
            "minProperties": 1,
            "maxProperties": 1,
        }
    }

    p50: Duration | None = Field(default=None, gt=0)
    p90: Duration | None = Field(default=None, gt=0)
    p95: Duration | None = Field(default=None, gt=0)
    p99: Duration | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _exactly_one_percentile(self) -> LatencyTarget:
        given = [f"p{p}" for p in (50, 90, 95, 99) if getattr(self, f"p{p}") is not None]
        if len(given) != 1:
            raise ValueError(
                f"set exactly one percentile (p50, p90, p95 or p99); given: {given or 'none'}"
            )
        return self

    @property
    def percentile(self) -> int:
        """The percentile the target is set at (50, 90, 95 or 99)."""
        for pct in (50, 90, 95, 99):
            if getattr(self, f"p{pct}") is not None:
                return pct
        return 90

    @property
    def seconds(self) -> float:
        """The target latency in seconds."""
        value: float | None = getattr(self, f"p{self.percentile}")
        return 0.0 if value is None else value


class PriorityClass(Model):
    """A class of requests with its own targets and vLLM ``priority``."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=63)
    priority: int = Field(
        default=0, ge=-1000, le=1000, description="vLLM request priority (lower runs first)."
    )
    ttft: LatencyTarget | None = None
    itl: LatencyTarget | None = None
    max_inflight: int | None = Field(
        default=None, ge=1, description="Admission limit per router replica for this class."
    )


class QosSpec(Model):
    """The latency the service declares, and how to trade throughput against it."""

    ttft: LatencyTarget = Field(default_factory=lambda: LatencyTarget(p90=1.0))
    itl: LatencyTarget = Field(default_factory=lambda: LatencyTarget(p90=0.05))
    objective: Objective = Field(
        default="balanced",
        description="latency: more headroom, lower utilization. throughput: run pools hot.",
    )
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=16)
    default_class: str | None = Field(
        default=None, description="Class of requests without the header (default: first class)."
    )


class StepLimits(Model):
    """The most replicas one autoscaler tick may add or remove."""

    up: int = Field(default=4, ge=1, le=1000)
    down: int = Field(default=1, ge=1, le=1000)


class QueueThresholds(Model):
    """Thresholds of the ``queue`` policy (KEDA-like)."""

    waiting_per_replica: float = Field(
        default=5.0, gt=0, description="Target vllm:num_requests_waiting per replica."
    )
    kv_usage: float = Field(default=0.8, gt=0, le=1, description="Target KV-cache usage (0-1).")


class MetricsSource(Model):
    """Where the autoscaler reads its signals."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            ("self.source != 'prometheus' || has(self.url)", "prometheus source needs url"),
        )
    }

    source: Literal["pods", "prometheus"] = Field(
        default="pods", description="pods: scrape every pod's /metrics. prometheus: query it."
    )
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    scrape_timeout: Duration = Field(default=2.0, gt=0, le=60)


class RatioBounds(Model):
    """Bounds on prefill replicas / decode replicas."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "!has(self.min) || !has(self.max) || self.min <= self.max",
                "ratio min must be <= max",
            ),
        )
    }

    min: float | None = Field(default=None, gt=0)
    max: float | None = Field(default=None, gt=0)


class AutoscalingSpec(Model):
    """How each pool is resized."""

    policy: PolicyName = Field(
        default="slo",
        description="slo: size each pool toward the qos targets. queue: thresholds on queue "
        "depth and KV usage. static: replicas.initial, never changed.",
    )
    interval: Duration = Field(default=15.0, ge=1, le=600, description="Tick interval.")
    scale_up_stabilization: Duration = Field(default=0.0, ge=0, le=3600)
    scale_down_stabilization: Duration = Field(default=300.0, ge=0, le=7200)
    max_step: StepLimits = Field(default_factory=StepLimits)
    queue: QueueThresholds = Field(default_factory=QueueThresholds)
    metrics: MetricsSource = Field(default_factory=MetricsSource)
    prefill_decode_ratio: RatioBounds | None = None
    cold_start: Duration = Field(
        default=120.0, ge=0, le=3600, description="Expected time from scale-up to a ready pod."
    )
    burst_memory: Duration = Field(
        default=1800.0,
        ge=0,
        le=86400,
        description="Half-life of the slo policy's memory of a pool's recent peak: through "
        "quiet spells a pool keeps a share of it (0.8 latency, 0.7 balanced, 0.5 "
        "throughput), so traffic that returns in bursts does not wait a cold start. "
        "0s turns it off.",
    )


class MonitoringSpec(Model):
    """Prometheus Operator objects to create for this service."""

    service_monitor: bool = Field(default=False, description="ServiceMonitor for the router.")
    pod_monitor: bool = Field(default=False, description="PodMonitor for the engine pods.")
    interval: Duration = Field(default=15.0, ge=1, le=600)


class InferenceServiceSpec(Model):
    """Desired state of an InferenceService."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "self.mode == 'aggregated' ? (!has(self.prefill) && !has(self.decode)) "
                ": !has(self.pool)",
                "aggregated mode uses `pool`; disaggregated mode uses `prefill` and `decode`",
            ),
        )
    }

    model: ModelSpec
    mode: Mode = "disaggregated"
    engine: EngineSpec = Field(default_factory=EngineSpec)
    prefill: PoolSpec | None = None
    decode: PoolSpec | None = None
    pool: PoolSpec | None = None
    router: RouterSpec = Field(default_factory=RouterSpec)
    qos: QosSpec = Field(default_factory=QosSpec)
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)

    def pools(self) -> dict[PoolRole, PoolSpec]:
        """The pools this mode runs, by role (``prefill``/``decode`` or ``pool``)."""
        if self.mode == "aggregated":
            return {"pool": self.pool or PoolSpec()}
        return {"prefill": self.prefill or PoolSpec(), "decode": self.decode or PoolSpec()}
