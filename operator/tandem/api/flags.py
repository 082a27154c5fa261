"""The ``vllm serve`` flags Tandem sets itself, and the field that controls each. Pure.

Both :mod:`tandem.api.rules` (``tandem validate``, naming the field to use) and the CRD's
CEL rule on ``engine.extraArgs`` (:func:`owned_flag_regex`) read this one list.
"""

from __future__ import annotations

import re

#: vLLM flags Tandem sets itself, and the field that controls each.
OWNED_FLAGS: dict[str, str] = {
    "--model": "spec.model.uri",
    "--revision": "spec.model.uri (hf://org/name@revision)",
    "--served-model-name": "spec.model.name",
    "--max-model-len": "spec.model.maxModelLen",
    "--tensor-parallel-size": "spec.<pool>.tensorParallelSize",
    "-tp": "spec.<pool>.tensorParallelSize",
    "--max-num-seqs": "spec.<pool>.maxNumSeqs",
    "--max-num-batched-tokens": "spec.<pool>.maxNumBatchedTokens",
    "--long-prefill-token-threshold": "spec.<pool>.longPrefillTokenThreshold",
    "--gpu-memory-utilization": "spec.<pool>.gpuMemoryUtilization",
    "--kv-transfer-config": "spec.engine.kvTransfer",
    "--scheduling-policy": "spec.engine.schedulingPolicy",
    "--enable-prefix-caching": "spec.engine.prefixCaching",
    "--disable-prefix-caching": "spec.engine.prefixCaching",
    "--no-enable-prefix-caching": "spec.engine.prefixCaching",
    "--shutdown-timeout": "spec.engine.shutdownTimeout",
    "--otlp-traces-endpoint": "spec.tracing.endpoint",
    "--port": "(Tandem serves engines on port 8000)",
    "--host": "(Tandem binds engines to all interfaces)",
    "--uds": "(Tandem serves engines over TCP port 8000)",
}


def owned_flag_regex() -> str:
    """An RE2 pattern matching an argument that sets an owned flag (``--model=x``,
    ``--kv-transfer-config.kv_role``, ``-tp``), for CEL's ``matches``.

    >>> bool(re.match(owned_flag_regex(), "--max-num-seqs=8"))
    True
    >>> bool(re.match(owned_flag_regex(), "--model-impl"))
    False
    """
    names = "|".join(sorted(f.lstrip("-") for f in OWNED_FLAGS))
    # Flags are letters, digits and '-': nothing to escape (CEL strings take no '\\-').
    assert re.fullmatch(r"[-|a-z0-9]+", names), names
    return f"^--?({names})([=.].*)?$"
