"""The pure engine model: continuous batching, paged KV cache, roofline cost, presets.

No I/O, no asyncio, no clock reads (time is passed in as ``now_s``). The public API:

- :class:`Engine` (``add_request``, ``step``, ``abort``, ``complete_kv_transfer``,
  ``release_kv``, ``extend_kv_lease``, ``next_timer_s``, ``stats``) and its
  :class:`EngineConfig`;
- :class:`EngineRequest`, :class:`RemoteKV` in; :class:`IterationResult`,
  :class:`FinishedRequest`, :class:`KVTransferStart`, :class:`EngineStats` out;
- :class:`CostModel` with :class:`Calibration`, and the presets (:func:`get_model`,
  :func:`get_gpu`, :func:`model_spec_from_mapping`);
- :class:`Clock` and :class:`VirtualClock`.
"""

from tandem.engine.model.calibration import CALIBRATIONS, Calibration, lookup_calibration
from tandem.engine.model.clock import Clock, VirtualClock
from tandem.engine.model.config import EngineConfig, default_scheduler_limits
from tandem.engine.model.cost import CostModel
from tandem.engine.model.engine import Engine
from tandem.engine.model.presets import (
    GPUS,
    MODELS,
    GpuSpec,
    ModelSpec,
    get_gpu,
    get_model,
    gpu_spec_from_mapping,
    model_spec_from_mapping,
)
from tandem.engine.model.request import (
    EngineRequest,
    EngineStats,
    FinishedRequest,
    FinishReason,
    HeldKV,
    IterationResult,
    KVTransferStart,
    RemoteKV,
)

__all__ = [
    "CALIBRATIONS",
    "GPUS",
    "MODELS",
    "Calibration",
    "Clock",
    "CostModel",
    "Engine",
    "EngineConfig",
    "EngineRequest",
    "EngineStats",
    "FinishReason",
    "FinishedRequest",
    "GpuSpec",
    "HeldKV",
    "IterationResult",
    "KVTransferStart",
    "ModelSpec",
    "RemoteKV",
    "VirtualClock",
    "default_scheduler_limits",
    "get_gpu",
    "get_model",
    "gpu_spec_from_mapping",
    "lookup_calibration",
    "model_spec_from_mapping",
]
