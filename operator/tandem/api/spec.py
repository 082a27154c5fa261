"""The ``InferenceService`` spec as pydantic v2 models: the single source of truth. Pure.

The CRD in ``crds/`` is generated from these models (:mod:`tandem.api.crd`); the field
descriptions below become ``kubectl explain`` text. Durations are seconds (see
:mod:`tandem.api.durations`), token counts are tokens, and rates are per second.
Cross-field rules are written twice on purpose: as CEL on the model (the API server
enforces them) and in :mod:`tandem.api.rules` (``tandem validate`` and the operator
report every broken rule with its field path).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from tandem.api.base import DNS_LABEL_PATTERN, FreeForm, Model, PositiveQuantity, Quantity, cel
from tandem.api.durations import Duration, FineDuration, default_duration
from tandem.api.flags import owned_flag_regex
from tandem.api.vocab import Mode, Objective, PolicyName, PoolRole

#: One path segment that is neither ``.`` nor ``..`` (a ``pvc://`` path stays inside its
#: claim: ``pvc://claim/../../etc`` would otherwise serve ``/etc``).
_SEGMENT = (
    r"([-A-Za-z0-9_+=,@~%]|\.[-A-Za-z0-9_+=,@~%]|\.\.[-A-Za-z0-9_.+=,@~%])[-A-Za-z0-9_.+=,@~%]*"
)
#: ``hf://org/name[@revision]``, ``pvc://claim/path``, ``s3://bucket/path`` or
#: ``file:///abs/path`` (a folder on this machine: ``tandem up`` only, the operator
#: refuses it, :mod:`tandem.control.restrictions`).
MODEL_URI_PATTERN = (
    r"^(hf://[A-Za-z0-9][-A-Za-z0-9_.]*/[-A-Za-z0-9_.]+(@" + _SEGMENT + r"(/" + _SEGMENT + r")*)?"
    r"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/" + _SEGMENT + r")*/?"
    r"|s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/" + _SEGMENT + r")*/?"
    r"|file://(/" + _SEGMENT + r")+/?)$"
)
#: An extended resource (``nvidia.com/gpu``): a domain-qualified name. Names without a
#: domain (``cpu``, ``memory``) are the pod's own resources and would override them.
EXTENDED_RESOURCE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: Upper bound of every duration that has no tighter one.
MAX_DURATION_S = 3600

KvConnector = Literal["NixlConnector", "LMCacheConnectorV1", "MooncakeConnector", "MultiConnector"]
GpuType = Literal["H100", "H200", "A100", "L40S"]


class SecretRef(Model):
    """A Secret holding credentials for the model source, exposed to engines as env only."""

    name: str = Field(
        pattern=DNS_LABEL_PATTERN, max_length=253, description="Secret name in the same namespace."
    )
    key: str = Field(
        default="token",
        pattern=r"^[-._a-zA-Z0-9]+$",
        max_length=253,
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
        max_length=1024,
        description="Weights: hf://org/name[@revision], pvc://claim/path, s3://bucket/path, "
        "or file:///abs/path, a model folder on the machine `tandem up` runs on (the "
        "operator refuses file://: in a cluster put the folder on a volume and use "
        "pvc://). No '.' or '..' path segments.",
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

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "!has(self.extraArgs) || "
                f"self.extraArgs.all(a, !a.matches('{owned_flag_regex()}'))",
                "extraArgs must not set a flag Tandem sets (--model, --max-num-seqs, "
                "--kv-transfer-config, ...): use the field for it (tandem validate names it)",
            ),
        )
    }

    backend: Literal["vllm", "sim"] = Field(
        default="vllm",
        description="vllm: the GPU engine. sim: Tandem's simulated vLLM-compatible engine "
        "(CPU only), for clusters without GPUs.",
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        pattern=r"^[^\t\n\f\r ]+$",
        description="Container image; defaults to the pinned vLLM image (vllm) or Tandem's "
        "image (sim). The operator may limit it to allowed repositories.",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="fcfs", description="vLLM --scheduling-policy (priority: lower value first)."
    )
    prefix_caching: bool = Field(default=True, description="vLLM automatic prefix caching.")
    kv_transfer: KvTransferSpec = Field(default_factory=KvTransferSpec)
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra `vllm serve` arguments. Flags Tandem sets from other fields are "
        "rejected with the field to use instead.",
    )
    shutdown_timeout: Duration = Field(
        default=default_duration("30s"),
        le=3600,
        description="How long an engine drains running requests on SIGTERM (vLLM "
        "--shutdown-timeout).",
    )
    startup_timeout: Duration = Field(
        default=default_duration("30m"),
        ge=60,
        le=21600,
        description="How long weight loading may take before the pod is restarted.",
    )
    shm_size: PositiveQuantity = Field(
        default="8Gi", description="Size of the memory-backed /dev/shm."
    )
    sim_model: str = Field(
        default="llama-3.1-8b",
        max_length=64,
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

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "!self.resourceName.startsWith('kubernetes.io/') && "
                "!self.resourceName.contains('.kubernetes.io/')",
                "gpu.resourceName must be an extended resource outside kubernetes.io, "
                "e.g. nvidia.com/gpu or amd.com/gpu",
            ),
        )
    }

    count: int = Field(default=1, ge=0, le=64, description="GPUs per replica.")
    type: GpuType | None = Field(
        default=None,
        description="GPU model, used by the cost model (sim backend, capacity estimates). "
        "Schedule onto it with nodeSelector.",
    )
    resource_name: str = Field(
        default="nvidia.com/gpu",
        pattern=EXTENDED_RESOURCE_PATTERN,
        max_length=253,
        description="Extended resource name of the device plugin (a domain-qualified name "
        "such as nvidia.com/gpu; not cpu or memory).",
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

    key: str | None = Field(default=None, max_length=317)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=1_000_000_000)


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
    memory: PositiveQuantity | None = Field(default=None, description="Memory per replica.")
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="vLLM --tensor-parallel-size (default gpu.count)."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="--max-num-seqs.")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=16, le=1_048_576, description="--max-num-batched-tokens."
    )
    long_prefill_token_threshold: int | None = Field(
        default=None,
        ge=0,
        le=1_048_576,
        description="--long-prefill-token-threshold: the most prompt tokens one request "
        "computes per engine step while others run or wait, so a long prompt does not hold "
        "short ones behind it (0: no cap).",
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="--gpu-memory-utilization (fraction of GPU memory)."
    )
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=64)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    affinity: FreeForm | None = Field(default=None, description="Pod affinity, verbatim.")
    profile: PoolProfile | None = None

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size: explicit, or one shard per GPU."""
        return self.tensor_parallel_size or max(self.gpu.count, 1)


class RouterTimeouts(Model):
    """Router timeouts; each ends a request cleanly instead of letting it hang."""

    connect: Duration = Field(
        default=default_duration("5s"),
        gt=0,
        le=300,
        description="Connecting to an engine (at most 5m).",
    )
    prefill: Duration = Field(
        default=default_duration("1m"),
        gt=0,
        le=MAX_DURATION_S,
        description="The whole prefill leg (at most 1h).",
    )
    first_token: Duration = Field(
        default=default_duration("2m"),
        gt=0,
        le=MAX_DURATION_S,
        description="From the decode request to its first byte; for a non-streaming answer, "
        "the longest the engine may show no progress (at most 1h).",
    )
    idle_stream: Duration = Field(
        default=default_duration("1m"),
        gt=0,
        le=MAX_DURATION_S,
        description="Longest silence inside a streaming response, and longest a streaming "
        "client may read nothing (at most 1h; the router's termination grace period is this "
        "plus 30s).",
    )
    request_header: Duration = Field(
        default=default_duration("10s"),
        gt=0,
        le=300,
        description="From a client's connect (or a later request's first byte) to its whole "
        "request head (at most 5m).",
    )
    request_body: Duration = Field(
        default=default_duration("30s"),
        gt=0,
        le=MAX_DURATION_S,
        description="From the request head to the whole body, read before admission; beyond "
        "it: 408 (at most 1h).",
    )
    client_idle: Duration = Field(
        default=default_duration("75s"),
        gt=0,
        le=MAX_DURATION_S,
        description="A client's keep-alive connection without a request is closed after this "
        "(at most 1h).",
    )


class RouterSpec(Model):
    """The OpenAI-compatible router in front of the pools."""

    replicas: int = Field(default=2, ge=1, le=100)
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        pattern=r"^[^\t\n\f\r ]+$",
        description="Default: Tandem's image.",
    )
    cpu: Quantity = Field(default="1", description="CPU request per router replica.")
    memory: PositiveQuantity = Field(default="512Mi", description="Memory per router replica.")
    max_inflight: int = Field(
        default=1024, ge=1, le=1_000_000, description="In-flight requests per router replica."
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=1 << 30, description="Largest request body."
    )
    max_connections_per_client: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="Open connections per client address and router replica; beyond it the "
        "address's oldest idle one is closed, or the new one. Raise it behind an ingress or a "
        "NAT that brings many users from one address.",
    )
    timeouts: RouterTimeouts = Field(default_factory=RouterTimeouts)
    priority_header: str = Field(
        default="x-tandem-priority-class",
        pattern=r"^[A-Za-z0-9-]+$",
        max_length=64,
        description="Request header naming the priority class.",
    )
    short_prompt_tokens: int = Field(
        default=0,
        ge=0,
        le=2_097_152,
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

    p50: Duration | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    p90: Duration | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    p95: Duration | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    p99: Duration | None = Field(default=None, gt=0, le=MAX_DURATION_S)

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


class TtftTarget(LatencyTarget):
    """A TTFT target at one percentile, plus an optional allowance per prompt token.

    ``{p90: 1s, perPromptToken: 50us}``: a 20,000-token prompt may take 1 s + 20,000 x
    50 us = 2 s. Long-context services state TTFT that way, since prefill time grows
    with the prompt.
    """

    model_config = LatencyTarget.model_config | {
        "json_schema_extra": {
            **cel(
                (
                    "[has(self.p50), has(self.p90), has(self.p95), has(self.p99)]"
                    ".filter(x, x).size() == 1",
                    "set exactly one percentile (p50, p90, p95 or p99)",
                )
            ),
            # maxProperties no longer says "one percentile" once perPromptToken may sit
            # beside it: the schema says so itself (the API server checks it before CEL).
            "oneOf": [{"required": [f"p{p}"]} for p in (50, 90, 95, 99)],
            "minProperties": 1,
            "maxProperties": 2,
        }
    }

    per_prompt_token: FineDuration | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Added to the target for every prompt token (e.g. 50us): the target "
        "of a request is the percentile's budget + perPromptToken x its prompt tokens.",
    )

    @property
    def per_prompt_token_s(self) -> float:
        """Seconds of allowance per prompt token (0 when not declared)."""
        return self.per_prompt_token or 0.0

    def seconds_for(self, prompt_tokens: float) -> float:
        """The target of a request of ``prompt_tokens``.

        >>> TtftTarget(p90=1.0, per_prompt_token=5e-05).seconds_for(20_000)
        2.0
        """
        return self.seconds + self.per_prompt_token_s * prompt_tokens


class PriorityClass(Model):
    """A class of requests with its own targets and vLLM ``priority``."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=63)
    priority: int = Field(
        default=0, ge=-1000, le=1000, description="vLLM request priority (lower runs first)."
    )
    ttft: TtftTarget | None = None
    itl: LatencyTarget | None = None
    max_inflight: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Admission limit per router replica for this class.",
    )
    require_key: bool = Field(
        default=False,
        description="Only requests with an API key (Authorization: Bearer) that the Secret "
        "<name>-class-keys grants this class may use it; without, the class header is 401.",
    )


class QosSpec(Model):
    """The latency the service declares, and how to trade throughput against it."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "!has(self.priorityClasses) || self.priorityClasses.all(c, "
                "self.priorityClasses.filter(d, d.name == c.name).size() == 1)",
                "priority class names must be unique",
            ),
            (
                "!has(self.defaultClass) || (has(self.priorityClasses) && "
                "self.priorityClasses.exists(c, c.name == self.defaultClass))",
                "defaultClass must name one of priorityClasses",
            ),
        )
    }

    ttft: TtftTarget = Field(default_factory=lambda: TtftTarget(p90=1.0))
    itl: LatencyTarget = Field(default_factory=lambda: LatencyTarget(p90=0.05))
    objective: Objective = Field(
        default="balanced",
        description="latency: more headroom, lower utilization. throughput: run pools hot.",
    )
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=16)
    default_class: str | None = Field(
        default=None,
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="Class of requests without the header (default: first class).",
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
    url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\t\n\f\r ]+$",
        max_length=2048,
        description="Prometheus base URL (source prometheus); the operator may allow only "
        "some URLs.",
    )
    scrape_timeout: Duration = Field(default=default_duration("2s"), gt=0, le=60)


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
    interval: Duration = Field(
        default=default_duration("15s"), ge=1, le=600, description="Tick interval."
    )
    scale_up_stabilization: Duration = Field(default=default_duration("0s"), ge=0, le=3600)
    scale_down_stabilization: Duration = Field(default=default_duration("5m"), ge=0, le=7200)
    max_step: StepLimits = Field(default_factory=StepLimits)
    queue: QueueThresholds = Field(default_factory=QueueThresholds)
    metrics: MetricsSource = Field(default_factory=MetricsSource)
    prefill_decode_ratio: RatioBounds | None = None
    cold_start: Duration = Field(
        default=default_duration("2m"),
        ge=0,
        le=3600,
        description="Expected time from scale-up to a ready pod.",
    )
    burst_memory: Duration = Field(
        default=default_duration("30m"),
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
    interval: Duration = Field(default=default_duration("15s"), ge=1, le=600)


class TracingSpec(Model):
    """OpenTelemetry traces of requests: the router's spans and the vLLM engines', sent
    over OTLP/HTTP to one collector, so one trace shows router, prefill, KV and decode."""

    endpoint: str = Field(
        pattern=r"^https?://[^\t\n\f\r ]+$",
        max_length=2048,
        description="OTLP/HTTP base URL of the collector, e.g. "
        "http://otel-collector.monitoring:4318 (spans go to <endpoint>/v1/traces).",
    )
    sampling_ratio: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Share of requests traced when the client sent no trace context; a "
        "client's own sampling decision (its traceparent) is always followed.",
    )


class InferenceServiceSpec(Model):
    """Desired state of an InferenceService."""

    model_config = Model.model_config | {
        "json_schema_extra": cel(
            (
                "self.mode == 'aggregated' ? (!has(self.prefill) && !has(self.decode)) "
                ": !has(self.pool)",
                "aggregated mode uses `pool`; disaggregated mode uses `prefill` and `decode`",
            ),
            (
                "self.engine.backend != 'vllm' || "
                "((!has(self.prefill) || self.prefill.gpu.count > 0) && "
                "(!has(self.decode) || self.decode.gpu.count > 0) && "
                "(!has(self.pool) || self.pool.gpu.count > 0))",
                "0 GPUs cannot run the vllm backend; use gpu.count >= 1 or engine.backend 'sim'",
            ),
            (
                "self.engine.schedulingPolicy == 'priority' || !has(self.qos.priorityClasses) "
                "|| self.qos.priorityClasses.all(c, c.priority == 0)",
                "priority classes with non-zero priority need engine.schedulingPolicy 'priority'",
            ),
            (
                "self.mode != 'aggregated' || !has(self.autoscaling.prefillDecodeRatio)",
                "autoscaling.prefillDecodeRatio is only meaningful in disaggregated mode",
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
    tracing: TracingSpec | None = Field(
        default=None, description="OpenTelemetry traces of requests (off when unset)."
    )

    def pools(self) -> dict[PoolRole, PoolSpec]:
        """The pools this mode runs, by role (``prefill``/``decode`` or ``pool``)."""
        if self.mode == "aggregated":
            return {"pool": self.pool or PoolSpec()}
        return {"prefill": self.prefill or PoolSpec(), "decode": self.decode or PoolSpec()}
