"""Per-app state of the simulated server: the engine, its runner, metrics and fault draws.

Building it does no I/O; the background tasks and the HTTP client session start in the
app's ``cleanup_ctx`` (``app.py``).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import Literal

import aiohttp
from aiohttp import web

from tandem.engine.model import Engine, EngineStats
from tandem.engine.server.config import SimServerConfig
from tandem.engine.server.metrics import EngineMetrics
from tandem.engine.server.realtime import AsyncioClock
from tandem.engine.server.runner import EngineRunner

Fault = Literal["ok", "error", "hang", "crash"]


class ServerState:
    """Everything one app instance owns."""

    def __init__(self, config: SimServerConfig, on_crash: Callable[[], None] | None) -> None:
        self.config = config
        engine_config = config.engine
        if config.role == "decode":
            engine_config = dataclasses.replace(engine_config, kv_transfer_mode="external")
        self.engine = Engine(engine_config, config.cost)
        self.clock = AsyncioClock(config.speedup)
        cache_info = {
            "block_size": str(engine_config.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(engine_config.enable_prefix_caching),
            "gpu_memory_utilization": str(config.gpu_memory_utilization),
            "num_gpu_blocks": str(engine_config.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "num_cpu_blocks": "None",
            "prefix_caching_hash_algo": "sha256",
        }
        self.metrics = EngineMetrics(
            config.served_model_names[0],
            engine_config.max_model_len,
            cache_info,
            config.role,
            config.engine_index,
        )
        self.runner = EngineRunner(self.engine, self.clock, self.metrics)
        self.on_crash = on_crash
        self.started_monotonic = time.monotonic()
        self.dead = False
        self.draining = False
        """SIGTERM arrived: running requests finish, new ones are refused."""
        self.output_rng = random.Random()
        """Draws the outputs of unseeded sampled requests (fresh each process, as vLLM)."""
        self.requests_seen = 0
        self.next_block_id = 0
        self.session: aiohttp.ClientSession | None = None
        self._rng = random.Random(config.faults.seed)
        self._prev_stats: EngineStats | None = None
        self.created = int(time.time())

    @property
    def ready(self) -> bool:
        """True once the simulated weight loading (start-up delay) is over."""
        elapsed = time.monotonic() - self.started_monotonic
        return elapsed >= self.config.startup_delay_s

    def draw_fault(self) -> Fault:
        """Count a generation request and decide whether a fault hits it."""
        faults = self.config.faults
        self.requests_seen += 1
        if faults.crash_after is not None and self.requests_seen > faults.crash_after:
            return "crash"
        if faults.error_rate and self._rng.random() < faults.error_rate:
            return "error"
        if faults.hang_rate and self._rng.random() < faults.hang_rate:
            return "hang"
        return "ok"

    def refresh_metrics(self) -> None:
        stats = self.engine.stats()
        self.metrics.refresh(stats, self._prev_stats)
        self._prev_stats = stats

    def local_address(self, request: web.Request) -> tuple[str, int]:
        """(host, port) to advertise for KV pulls of ``request``'s response."""
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        host = self.config.kv_host or (sockname[0] if sockname else "127.0.0.1")
        port = self.config.kv_port or (sockname[1] if sockname else 8000)
        return host, int(port)
