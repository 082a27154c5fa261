"""From preset names and flag values to a :class:`SimServerConfig`. Pure."""

from __future__ import annotations

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
from tandem.engine.server.config import FaultConfig, Role, SimServerConfig


@dataclass(frozen=True)
class SimOptions:
    """Everything ``tandem engine sim`` takes; ``None`` means vLLM's default for the GPU."""

    role: Role = "aggregated"
    model: str = "llama-3.1-8b"
    model_spec: ModelSpec | None = None
    """A custom model (overrides ``model``)."""
    gpu: str = "h100"
    gpu_spec: GpuSpec | None = None
    tensor_parallel: int = 1
    served_model_names: tuple[str, ...] = ()
    calibration: Calibration | None = None
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    """Other :class:`EngineConfig` fields (``scheduling_policy``, ``kv_lease_s``, ...)."""
    server: dict[str, Any] = field(default_factory=dict)
    """Other :class:`SimServerConfig` fields (``startup_delay_s``, ``speedup``, ...)."""
    faults: FaultConfig = field(default_factory=FaultConfig)
    engine_id: str | None = None


def build_server_config(opts: SimOptions) -> SimServerConfig:
    """Resolve presets and defaults; ``ValueError``/``KeyError`` name the bad option."""
    model = opts.model_spec or get_model(opts.model)
    gpu = opts.gpu_spec or get_gpu(opts.gpu)
    cost = CostModel(model, gpu, opts.tensor_parallel, opts.calibration)
    default_seqs, default_tokens = default_scheduler_limits(gpu)
    block_size = int(opts.engine.get("block_size", 16))
    blocks = opts.num_gpu_blocks or cost.num_gpu_blocks(block_size, opts.gpu_memory_utilization)
    if blocks < 1:
        raise ValueError(
            f"{model.name} does not fit on {opts.tensor_parallel} x {gpu.name} at "
            f"gpu_memory_utilization={opts.gpu_memory_utilization}: no room for KV cache"
        )
    max_model_len = opts.max_model_len or model.max_model_len
    engine = EngineConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=opts.max_num_seqs or default_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens or default_tokens,
        max_model_len=max_model_len,
        **opts.engine,
    )
    names = opts.served_model_names or (model.name,)
    return SimServerConfig(
        role=opts.role,
        served_model_names=names,
        cost=cost,
        engine=engine,
        engine_id=opts.engine_id or str(uuid.uuid4()),
        gpu_memory_utilization=opts.gpu_memory_utilization,
        faults=opts.faults,
        **opts.server,
    )
