"""Settings of one simulated engine server. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tandem.engine.model import CostModel, EngineConfig

Role = Literal["aggregated", "prefill", "decode"]


@dataclass(frozen=True)
class FaultConfig:
    """Faults to inject, for tests of whatever sits in front of the engine."""

    error_rate: float = 0.0
    """Fraction of generation requests answered with ``error_status`` at once, 0-1."""
    error_status: int = 500
    """HTTP status of injected errors (500, 503 or 429)."""
    hang_rate: float = 0.0
    """Fraction of generation requests that never answer (until the client goes away)."""
    crash_after: int | None = None
    """The engine dies when request number ``crash_after + 1`` arrives: in-flight requests
    fail, ``/health`` answers 503, and the process exits (the CLI) or stays dead (in-process)."""
    seed: int = 0
    """Seed of the fault draws, so a run is reproducible."""


@dataclass(frozen=True)
class SimServerConfig:
    """One ``tandem engine sim`` process."""

    role: Role
    served_model_names: tuple[str, ...]
    """Names ``model`` may take; the first labels metrics (``model_name``)."""
    cost: CostModel
    engine: EngineConfig
    engine_id: str
    """``remote_engine_id`` advertised to decode engines."""
    startup_delay_s: float = 0.0
    """``/health`` answers 503 (and requests 503) until this much wall time has passed."""
    speedup: float = 1.0
    """Simulated seconds per wall second (see ``AsyncioClock``)."""
    eos_mean_tokens: int = 0
    """Mean output length at which the simulated model emits end-of-sequence (finish
    ``stop``), drawn per request seed; 0: never, outputs run to ``max_tokens``."""
    max_num_queued_reqs: int | None = None
    """Admission control: answer 503 when this many requests already wait."""
    max_num_queued_tokens: int | None = None
    """Admission control: answer 503 when waiting prompt tokens would exceed this."""
    kv_host: str | None = None
    """``remote_host`` advertised for KV pulls; None: the address the request arrived on."""
    kv_port: int | None = None
    """``remote_port`` advertised; None: the port the request arrived on."""
    kv_pull_timeout_s: float = 30.0
    """Decode role: wall-clock limit of one KV pull from the prefill engine."""
    gpu_memory_utilization: float = 0.9
    faults: FaultConfig = field(default_factory=FaultConfig)
    frontend_latency_s: float = 0.0
    """Simulated seconds each request is held before the engine model sees it: what a
    measured engine's front end added to its first tokens (a preset's ``frontend``)."""
    engine_index: str = "0"
    """Value of the ``engine`` label."""
