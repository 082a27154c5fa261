"""GPU and model presets: the hardware and architecture numbers the cost model needs. Pure.

A :class:`GpuSpec` is a roofline (peak dense bf16 FLOP/s, HBM bytes/s, memory bytes); a
:class:`ModelSpec` is an architecture (parameters, layers, hidden size, heads, KV heads, head
dimension, dtype). Any other model or GPU is a mapping of the same fields, see
:func:`model_spec_from_mapping` and :func:`gpu_spec_from_mapping`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

GIB = 1024**3

#: bytes per element for the dtypes the presets use
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "fp8": 1, "float32": 4}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator, as a roofline."""

    name: str
    """Preset key, lower case (``h100``)."""
    peak_flops: float
    """Dense bf16 tensor-core throughput, FLOP/s (H100 SXM: 989e12)."""
    hbm_bytes_per_s: float
    """HBM bandwidth, bytes/s (H100 SXM: 3.35e12)."""
    memory_bytes: int
    """Device memory, bytes (H100: 80 GiB)."""
    calibration_family: str
    """Which measured calibration applies (``h100`` or ``a100``); see ``calibration.py``."""


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer, as far as time and KV memory go."""

    name: str
    """Preset key or the Hugging Face id it stands for."""
    num_params: float
    """All parameters, including embeddings (Llama-3.1-8B: 8.03e9)."""
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    """Key/value heads (grouped-query attention); sets KV bytes per token."""
    head_dim: int
    vocab_size: int
    max_model_len: int
    """Longest context the model accepts, tokens."""
    dtype: str = "bfloat16"
    tied_embeddings: bool = False

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights read per forward pass (all of them)."""
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: 2 (K and V) x layers x KV heads x head_dim x dtype.

        Llama-3.1-8B: 2 x 32 x 8 x 128 x 2 = 131,072 bytes (128 KiB).
        """
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def matmul_params(self) -> float:
        """Parameters multiplied per token in the layers (embedding lookups are not matmuls)."""
        embed = self.vocab_size * self.hidden_size
        return self.num_params - (embed if self.tied_embeddings else 2 * embed)

    @property
    def lm_head_params(self) -> float:
        """Parameters of the output projection, applied only to sampled positions."""
        return float(self.vocab_size * self.hidden_size)

    @property
    def attn_flops_per_pair(self) -> float:
        """FLOPs for one (query, key) pair over all layers: QK^T and AV, 2 FLOPs per MAC."""
        return 4.0 * self.num_layers * self.num_heads * self.head_dim


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec("h100", 989e12, 3.35e12, 80 * GIB, "h100"),
    "h200": GpuSpec("h200", 989e12, 4.8e12, 141 * GIB, "h100"),
    "a100": GpuSpec("a100", 312e12, 2.039e12, 80 * GIB, "a100"),
    "a100-40gb": GpuSpec("a100-40gb", 312e12, 1.555e12, 40 * GIB, "a100"),
    "l40s": GpuSpec("l40s", 362e12, 0.864e12, 48 * GIB, "a100"),
}

MODELS: dict[str, ModelSpec] = {
    "llama-3.1-8b": ModelSpec(
        name="meta-llama/Llama-3.1-8B-Instruct",
        num_params=8.03e9,
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_model_len=131072,
    ),
    "llama-3.1-70b": ModelSpec(
        name="meta-llama/Llama-3.1-70B-Instruct",
        num_params=70.6e9,
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_model_len=131072,
    ),
    "llama-2-70b": ModelSpec(
        name="meta-llama/Llama-2-70b-hf",
        num_params=68.98e9,
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=32000,
        max_model_len=4096,
    ),
}

#: other spellings accepted by :func:`get_model`
_MODEL_ALIASES = {
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/llama-2-70b-hf": "llama-2-70b",
    "llama2-70b": "llama-2-70b",
}
_GPU_ALIASES = {"h100-80gb": "h100", "a100-80gb": "a100", "h200-141gb": "h200"}


def get_model(name: str) -> ModelSpec:
    """A preset by key or Hugging Face id, case-insensitive; ``KeyError`` lists the keys."""
    key = _MODEL_ALIASES.get(name.lower(), name.lower())
    if key not in MODELS:
        raise KeyError(f"unknown model preset {name!r}; presets: {', '.join(sorted(MODELS))}")
    return MODELS[key]


def get_gpu(name: str) -> GpuSpec:
    """A GPU preset by key (``h100``), case-insensitive; ``KeyError`` lists the keys."""
    key = _GPU_ALIASES.get(name.lower(), name.lower())
    if key not in GPUS:
        raise KeyError(f"unknown GPU preset {name!r}; presets: {', '.join(sorted(GPUS))}")
    return GPUS[key]


def _from_mapping(cls: type[Any], data: Mapping[str, Any], what: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{what}: unknown field(s) {unknown}; valid fields: {sorted(known)}")
    try:
        return cls(**dict(data))
    except TypeError as exc:
        raise ValueError(f"{what}: {exc}; valid fields: {sorted(known)}") from exc


def model_spec_from_mapping(data: Mapping[str, Any]) -> ModelSpec:
    """A custom model from a mapping of :class:`ModelSpec` fields (parsed JSON or YAML)."""
    spec: ModelSpec = _from_mapping(ModelSpec, data, "model config")
    if spec.dtype not in DTYPE_BYTES:
        raise ValueError(f"model config: dtype {spec.dtype!r} not in {sorted(DTYPE_BYTES)}")
    for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim"):
        if getattr(spec, name) <= 0:
            raise ValueError(f"model config: {name} must be > 0")
    return spec


def gpu_spec_from_mapping(data: Mapping[str, Any]) -> GpuSpec:
    """A custom GPU from a mapping of :class:`GpuSpec` fields."""
    spec: GpuSpec = _from_mapping(GpuSpec, data, "gpu config")
    return spec
