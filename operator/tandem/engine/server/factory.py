"""From preset names and flag values to a :class:`SimServerConfig`. Pure."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from tandem.engine.model import (
    Calibration,
    CostModel,
    EngineConfig,
    GpuSpec,
    ModelSpec,
    default_scheduler_limits,
    get_gpu,
    get_model,
)
from tandem.engine.model.config import Batching, KVLoadFailurePolicy, Prioritize, SchedulingPolicy
from tandem.engine.server.config import FaultConfig, Role, SimServerConfig

#: The configurations' field defaults: options take their defaults from the configuration
#: they fill, so each default has one source.
_ENGINE: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
_SERVER: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SimServerConfig)}


@dataclass(frozen=True)
class SimOptions:
    """Everything ``tandem engine sim`` takes; ``None`` means vLLM's default for the GPU.

    The scheduler's and the server's settings are the fields of :class:`EngineConfig` and
    :class:`SimServerConfig` of the same names, with their defaults."""

    role: Role = "aggregated"
    model: str = "llama-3.1-8b"
    model_spec: ModelSpec | None = None
    """A custom model (overrides ``model``)."""
    gpu: str = "h100"
    gpu_spec: GpuSpec | None = None
    tensor_parallel: int = 1
    served_model_names: tuple[str, ...] = ()
    calibration: Calibration | None = None
    gpu_memory_utilization: float = _SERVER["gpu_memory_utilization"]
    num_gpu_blocks: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    # the engine model's scheduler and cache (EngineConfig)
    block_size: int = _ENGINE["block_size"]
    scheduling_policy: SchedulingPolicy = _ENGINE["scheduling_policy"]
    batching: Batching = _ENGINE["batching"]
    prioritize: Prioritize = _ENGINE["prioritize"]
    enable_chunked_prefill: bool = _ENGINE["enable_chunked_prefill"]
    long_prefill_token_threshold: int = _ENGINE["long_prefill_token_threshold"]
    enable_prefix_caching: bool = _ENGINE["enable_prefix_caching"]
    kv_lease_s: float = _ENGINE["kv_lease_s"]
    kv_link_bytes_per_s: float = _ENGINE["kv_link_bytes_per_s"]
    kv_load_failure_policy: KVLoadFailurePolicy = _ENGINE["kv_load_failure_policy"]
    # the server (SimServerConfig)
    startup_delay_s: float = _SERVER["startup_delay_s"]
    speedup: float = _SERVER["speedup"]
    eos_mean_tokens: int = _SERVER["eos_mean_tokens"]
    max_num_queued_reqs: int | None = _SERVER["max_num_queued_reqs"]
    max_num_queued_tokens: int | None = _SERVER["max_num_queued_tokens"]
    kv_host: str | None = _SERVER["kv_host"]
    kv_port: int | None = _SERVER["kv_port"]
    kv_pull_timeout_s: float = _SERVER["kv_pull_timeout_s"]
    faults: FaultConfig = field(default_factory=FaultConfig)
    frontend_latency_s: float = 0.0
    engine_id: str | None = None


def build_server_config(opts: SimOptions) -> SimServerConfig:
    """Resolve presets and defaults; ``ValueError``/``KeyError`` name the bad option."""
    model = opts.model_spec or get_model(opts.model)
    gpu = opts.gpu_spec or get_gpu(opts.gpu)
    cost = CostModel(model, gpu, opts.tensor_parallel, opts.calibration)
    default_seqs, default_tokens = default_scheduler_limits(gpu)
    blocks = opts.num_gpu_blocks or cost.num_gpu_blocks(
        opts.block_size, opts.gpu_memory_utilization
    )
    if blocks < 1:
        raise ValueError(
            f"{model.name} does not fit on {opts.tensor_parallel} x {gpu.name} at "
            f"gpu_memory_utilization={opts.gpu_memory_utilization}: no room for KV cache"
        )
    engine = EngineConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=opts.max_num_seqs or default_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens or default_tokens,
        max_model_len=opts.max_model_len or model.max_model_len,
        block_size=opts.block_size,
        scheduling_policy=opts.scheduling_policy,
        batching=opts.batching,
        prioritize=opts.prioritize,
        enable_chunked_prefill=opts.enable_chunked_prefill,
        long_prefill_token_threshold=opts.long_prefill_token_threshold,
        enable_prefix_caching=opts.enable_prefix_caching,
        kv_lease_s=opts.kv_lease_s,
        kv_link_bytes_per_s=opts.kv_link_bytes_per_s,
        kv_load_failure_policy=opts.kv_load_failure_policy,
    )
    return SimServerConfig(
        role=opts.role,
        served_model_names=opts.served_model_names or (model.name,),
        cost=cost,
        engine=engine,
        engine_id=opts.engine_id or str(uuid.uuid4()),
        startup_delay_s=opts.startup_delay_s,
        speedup=opts.speedup,
        eos_mean_tokens=opts.eos_mean_tokens,
        max_num_queued_reqs=opts.max_num_queued_reqs,
        max_num_queued_tokens=opts.max_num_queued_tokens,
        kv_host=opts.kv_host,
        kv_port=opts.kv_port,
        kv_pull_timeout_s=opts.kv_pull_timeout_s,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        faults=opts.faults,
        frontend_latency_s=opts.frontend_latency_s,
    )
