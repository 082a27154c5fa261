"""The architecture of the model an engine serves, for the cost model. Pure.

``tandem profile`` measures times; turning them into a preset needs the model's shape
(layers, heads, parameters: what one token costs in FLOPs and bytes). It comes from a
preset name, a file of :class:`~tandem.engine.model.ModelSpec` fields, or the model's own
Hugging Face ``config.json`` (:func:`model_spec_from_hf_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.engine.model import ModelSpec, model_spec_from_mapping
from tandem.engine.model.presets import DTYPE_BYTES

#: config.json's dtype names -> the cost model's
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16",
           "float32": "float32", "float": "float32"}  # fmt: skip
HF_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def model_spec_from_hf_config(config: Mapping[str, Any], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a Llama-style Hugging Face ``config.json``.

    Parameters are counted as a Llama's: per layer the Q, K, V and O projections and a
    gated MLP (three matrices of ``hidden x intermediate``), plus the embedding and,
    unless tied, the output head. Worked example, Llama-3.1-8B (hidden 4096, 32 layers,
    32 heads, 8 KV heads, intermediate 14336, vocabulary 128256, untied)::

        layer = 4096 x (4096 + 2 x 1024 + 4096) + 3 x 4096 x 14336 = 218.1M
        total = 32 x 218.1M + 2 x 128256 x 4096                      = 8.03e9

    >>> spec = model_spec_from_hf_config({"hidden_size": 4096, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    ...     "vocab_size": 128256, "max_position_embeddings": 131072,
    ...     "torch_dtype": "bfloat16"}, "llama")
    >>> round(spec.num_params / 1e9, 2), spec.head_dim, spec.kv_bytes_per_token
    (8.03, 128, 131072)
    """
    missing = [key for key in HF_REQUIRED if not isinstance(config.get(key), int)]
    if missing:
        raise ValueError(f"config.json: no whole-number {missing}; a decoder's config has "
                         f"{list(HF_REQUIRED)}")  # fmt: skip
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config.get("intermediate_size") or 4 * hidden)
    vocab = int(config["vocab_size"])
    tied = bool(config.get("tie_word_embeddings", False))
    raw_dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    dtype = _DTYPES.get(raw_dtype, "bfloat16")
    per_layer = hidden * (heads * head_dim + 2 * kv_heads * head_dim) + heads * head_dim * hidden
    per_layer += 3 * hidden * inter
    params = layers * per_layer + vocab * hidden * (1 if tied else 2)
    assert dtype in DTYPE_BYTES
    return model_spec_from_mapping(
        {
            "name": name,
            "num_params": float(params),
            "num_layers": layers,
            "hidden_size": hidden,
            "num_heads": heads,
            "num_kv_heads": kv_heads,
            "head_dim": head_dim,
            "vocab_size": vocab,
            "max_model_len": int(config.get("max_position_embeddings") or 4096),
            "dtype": dtype,
            "tied_embeddings": tied,
        }
    )


def model_spec_from_file(data: Mapping[str, Any], name: str) -> ModelSpec:
    """A ``--model-config`` file: ModelSpec fields, or a Hugging Face ``config.json``
    (told apart by ``num_hidden_layers``)."""
    if "num_hidden_layers" in data:
        return model_spec_from_hf_config(data, name)
    return model_spec_from_mapping(data)
