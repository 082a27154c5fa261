"""A measured engine as one preset: architecture, device rates, overheads, cache and limits. Pure.

``tandem profile`` fits one from an engine it measured; ``tandem engine sim --preset`` and
``tandem simulate --preset`` run the engine model with it. As a mapping (JSON or YAML;
also the ``preset`` block of a ``tandem profile`` document)::

    {"model": {ModelSpec fields}, "gpu": {GpuSpec fields}, "tensor_parallel": 1,
     "calibration": {"compute_efficiency": 1.0, "memory_efficiency": 1.0,
                     "overhead_s_per_layer": 0.0021, "seq_overhead_s_per_layer": 1.6e-4},
     "engine": {"num_gpu_blocks": 8192, "block_size": 128, "max_num_seqs": 64,
                "max_num_batched_tokens": 2048, "max_model_len": 2048},
     "frontend": {"latency_s": 0.006},
     "fit": {...}}

``frontend`` is optional (0 when absent): what the engine's front end (HTTP, the API
server, the hand-over to the engine loop and back) adds to each request's first token
beyond what the engine itself times.

A fitted preset folds the efficiencies into the device's rates (``gpu.peak_flops`` and
``gpu.hbm_bytes_per_s`` are what the engine achieved, the efficiencies 1.0); ``fit`` says
how well it matched its measurements and is not read back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.engine.model.calibration import Calibration
from tandem.engine.model.config import EngineConfig
from tandem.engine.model.cost import CostModel
from tandem.engine.model.presets import (
    GpuSpec,
    ModelSpec,
    gpu_spec_from_mapping,
    model_spec_from_mapping,
)

ENGINE_FIELDS = ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                 "max_model_len")  # fmt: skip
SECTIONS = ("model", "gpu", "tensor_parallel", "calibration", "engine", "frontend", "fit")


@dataclass(frozen=True)
class CostPreset:
    """One engine, measured: what the cost model and the scheduler need."""

    model: ModelSpec
    gpu: GpuSpec
    calibration: Calibration
    num_gpu_blocks: int
    """KV-cache blocks of ``block_size`` tokens (the engine's ``cache_config_info``)."""
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    tensor_parallel: int = 1
    frontend_latency_s: float = 0.0
    """Seconds the engine's front end adds to each request's first token beyond the
    engine's own TTFT (``tandem profile``: the clients' TTFT minus the engine's, one
    request at a time). The simulated engine holds each request this long before its
    engine model sees it; the fleet simulator adds it to each leg's first token."""
    fit: Mapping[str, Any] = field(default_factory=dict)
    """How the fit went (points, error); informational."""

    @property
    def kv_token_capacity(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def cost_model(self) -> CostModel:
        return CostModel(self.model, self.gpu, self.tensor_parallel, self.calibration)

    def engine_config(self, **overrides: Any) -> EngineConfig:
        """The scheduler and cache of the measured engine; ``overrides`` are other
        :class:`EngineConfig` fields (or these, replaced)."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in ENGINE_FIELDS}
        fields.update(overrides)
        return EngineConfig(**fields)

    def to_mapping(self) -> dict[str, Any]:
        """The JSON-ready mapping :func:`cost_preset_from_mapping` reads back."""
        out: dict[str, Any] = {
            "model": dataclasses.asdict(self.model),
            "gpu": dataclasses.asdict(self.gpu),
            "tensor_parallel": self.tensor_parallel,
            "calibration": dataclasses.asdict(self.calibration),
            "engine": {name: getattr(self, name) for name in ENGINE_FIELDS},
        }
        if self.frontend_latency_s:
            out["frontend"] = {"latency_s": self.frontend_latency_s}
        if self.fit:
            out["fit"] = dict(self.fit)
        return out


def cost_preset_from_mapping(data: Mapping[str, Any], where: str = "preset") -> CostPreset:
    """A preset from its mapping, or from a ``tandem profile`` document (its ``preset``).

    ``ValueError`` names the field (``preset.engine.block_size``) and what is valid.
    """
    if "preset" in data and "model" not in data:
        inner = data["preset"]
        if not isinstance(inner, Mapping):
            raise ValueError(f"{where}.preset: expected a mapping of {', '.join(SECTIONS)}")
        return cost_preset_from_mapping(inner, f"{where}.preset")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; valid: {list(SECTIONS)}")
    missing = [s for s in ("model", "gpu", "calibration", "engine") if s not in data]
    if missing:
        raise ValueError(f"{where}: missing {missing}; a preset has {list(SECTIONS)}")
    model_data, gpu_data = _section(data, "model", where), _section(data, "gpu", where)
    try:
        model = model_spec_from_mapping(model_data)
    except ValueError as err:
        raise ValueError(f"{where}.model: {err}") from None
    try:
        gpu = gpu_spec_from_mapping(gpu_data)
    except ValueError as err:
        raise ValueError(f"{where}.gpu: {err}") from None
    for name in ("peak_flops", "hbm_bytes_per_s", "memory_bytes"):
        if not getattr(gpu, name) > 0:
            raise ValueError(f"{where}.gpu.{name}: must be > 0, got {getattr(gpu, name)!r}")
    calibration = _calibration(_section(data, "calibration", where), f"{where}.calibration")
    engine = _section(data, "engine", where)
    bad = sorted(set(engine) - set(ENGINE_FIELDS))
    absent = [f for f in ENGINE_FIELDS if f not in engine]
    if bad or absent:
        raise ValueError(f"{where}.engine: unknown {bad}, missing {absent}; valid: "
                         f"{list(ENGINE_FIELDS)}")  # fmt: skip
    ints: dict[str, int] = {}
    for name in ENGINE_FIELDS:
        value = engine[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.engine.{name}: {value!r} is not a whole number >= 1")
        ints[name] = value
    tp = data.get("tensor_parallel", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"{where}.tensor_parallel: {tp!r} is not a whole number >= 1")
    fit = data.get("fit", {})
    if not isinstance(fit, Mapping):
        raise ValueError(f"{where}.fit: expected a mapping")
    frontend = _frontend_latency(data.get("frontend", {}), f"{where}.frontend")
    preset = CostPreset(model, gpu, calibration, tensor_parallel=tp,
                        frontend_latency_s=frontend, fit=dict(fit), **ints)  # fmt: skip
    try:
        preset.engine_config()
    except ValueError as err:
        raise ValueError(f"{where}.engine: {err}") from None
    return preset


def _frontend_latency(data: object, where: str) -> float:
    if not isinstance(data, Mapping):
        raise ValueError(f'{where}: expected a mapping like {{"latency_s": 0.005}}')
    unknown = sorted(set(data) - {"latency_s"})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; valid: ['latency_s']")
    value = data.get("latency_s", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 60:
        raise ValueError(f"{where}.latency_s: {value!r} is not a number of seconds in [0, 60)")
    return float(value)


def _section(data: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = data[name]
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.{name}: expected a mapping, got {type(value).__name__}")
    return value


def _calibration(data: Mapping[str, Any], where: str) -> Calibration:
    names = [f.name for f in dataclasses.fields(Calibration)]
    if set(data) != set(names):
        raise ValueError(f"{where}: needs exactly {names}, got {sorted(data)}")
    values = {}
    for name in names:
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}.{name}: {value!r} is not a number")
        values[name] = float(value)
    try:
        return Calibration(**values)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
