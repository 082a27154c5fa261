"""The cluster's ``vllm serve`` arguments made to run on vLLM's CPU build, on one machine. Pure.

Tandem renders arguments for vLLM 0.34 on GPUs (:mod:`tandem.manifests.vllm_args`). The
same arguments also start real engines on a machine without a GPU (the tests that run
every example's arguments, a laptop): :func:`adapt_vllm_args_for_cpu` is the one place
that says what changes on the way, and why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

#: Flags that only mean something on a GPU, with how many values each takes.
#: Tensor parallelism splits the model over that many GPUs (one process per GPU); a CPU
#: engine serves alone. The KV cache's share of GPU memory has a CPU twin,
#: ``VLLM_CPU_KVCACHE_SPACE`` (GiB), set in the engine's environment instead. Sleep mode
#: offloads weights from GPU memory (CUDA only).
GPU_ONLY_FLAGS: dict[str, int] = {
    "--tensor-parallel-size": 1,
    "-tp": 1,
    "--gpu-memory-utilization": 1,
    "--enable-sleep-mode": 0,
}
#: Flags that say where the cluster's weights come from (a Hub revision, the Run:ai
#: streamer for ``s3://``): meaningless for a model folder on this machine.
WEIGHT_SOURCE_FLAGS: dict[str, int] = {"--revision": 1, "--load-format": 1}
#: vLLM's CPU build is 0.32.0; flags 0.34 spells differently take their 0.32 spelling.
SPELLINGS_0_32: dict[str, str] = {"--disable-prefix-caching": "--no-enable-prefix-caching"}


def drop_flags(args: Sequence[str], flags: Mapping[str, int]) -> list[str]:
    """``args`` without each flag of ``flags`` and its values (``--flag v`` or ``--flag=v``).

    >>> drop_flags(["--a", "1", "--tp=2", "--b", "--c", "3"], {"--a": 1, "--tp": 1, "--b": 0})
    ['--c', '3']
    """
    out: list[str] = []
    skip = 0
    for arg in args:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = 0 if "=" in arg else flags[name]
            continue
        out.append(arg)
    return out


def set_flag(args: Sequence[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag``'s value set to ``value`` (appended when absent).

    >>> set_flag(["--port", "8000", "--x"], "--port", "9001")
    ['--port', '9001', '--x']
    >>> set_flag(["--x"], "--host", "127.0.0.1")
    ['--x', '--host', '127.0.0.1']
    """
    out = drop_flags(args, {flag: 1})
    if len(out) == len(args):
        return [*out, flag, value]
    at = next(i for i, arg in enumerate(args) if arg.split("=", 1)[0] == flag)
    return [*out[:at], flag, value, *out[at:]]


def adapt_vllm_args_for_cpu(
    args: Sequence[str],
    flags: frozenset[str] | None = None,
    *,
    model: str | None = None,
    max_model_len: int | None = None,
) -> list[str]:
    """The cluster's ``vllm serve`` arguments (after ``serve``) for vLLM 0.32's CPU build.

    What changes, and why:

    * **dropped**: the GPU-only flags of :data:`GPU_ONLY_FLAGS` (tensor parallelism, the
      GPU memory share, sleep mode): a CPU engine runs alone and sizes its KV cache from
      ``VLLM_CPU_KVCACHE_SPACE``;
    * **KV transfer through a CPU buffer**: ``kv_buffer_device: "cpu"`` joins the
      ``--kv-transfer-config`` (NIXL's UCX backend reads host memory; the default buffer
      is the GPU's);
    * **whole seconds**: ``--shutdown-timeout`` is an integer in 0.32, so a fraction is
      rounded up (never a shorter drain);
    * **the installed version's spellings**: with ``flags`` (the ``vllm serve`` flags of
      the vLLM that will run them, as ``tandem up`` reads them), an off switch is spelled
      as that version spells it (:func:`respell_flag`); without, as 0.32 spells it:
      ``--disable-prefix-caching`` becomes ``--no-enable-prefix-caching``
      (:data:`SPELLINGS_0_32`);
    * with ``model`` (a model folder on this machine): ``--model`` names it, and the
      flags of :data:`WEIGHT_SOURCE_FLAGS` go (they say where the cluster's weights come
      from); with ``max_model_len``: ``--max-model-len`` is at most that (the local
      model's context; vLLM refuses a longer one).

    Everything else, ``engine.extraArgs`` included, is kept as written, in order; where
    the engine listens (``--host``, ``--port``) is the caller's to set.

    >>> adapt_vllm_args_for_cpu(["--model", "o/n", "--revision", "r", "--max-model-len",
    ...     "16384", "--tensor-parallel-size", "4", "--disable-prefix-caching",
    ...     "--kv-transfer-config", '{"kv_role":"kv_consumer"}', "--shutdown-timeout", "1.5"],
    ...     model="/m/tiny", max_model_len=4096)
    ['--model', '/m/tiny', '--max-model-len', '4096', '--no-enable-prefix-caching', '--kv-transfer-config', '{"kv_buffer_device":"cpu","kv_role":"kv_consumer"}', '--shutdown-timeout', '2']
    """  # noqa: E501
    out = drop_flags(args, GPU_ONLY_FLAGS)
    if model is not None:
        out = set_flag(drop_flags(out, WEIGHT_SOURCE_FLAGS), "--model", model)
    if flags is None:
        out = [SPELLINGS_0_32.get(arg, arg) for arg in out]
    else:
        out = [respell_flag(arg, flags) for arg in out]
    for i, arg in enumerate(out[:-1]):
        if arg == "--kv-transfer-config":
            config = json.loads(out[i + 1])
            config["kv_buffer_device"] = "cpu"
            out[i + 1] = json.dumps(config, sort_keys=True, separators=(",", ":"))
        elif arg == "--shutdown-timeout":
            out[i + 1] = str(math.ceil(float(out[i + 1])))
        elif arg == "--max-model-len" and max_model_len is not None:
            out[i + 1] = str(min(int(out[i + 1]), max_model_len))
    return out


def respell_flag(arg: str, flags: frozenset[str]) -> str:
    """``arg`` as the vLLM whose flags are ``flags`` spells it: 0.34 turns a feature off
    with ``--disable-X``, 0.32 with argparse's ``--no-enable-X`` (the builders write the
    pinned version's spelling).

    >>> respell_flag("--disable-prefix-caching", frozenset({"--no-enable-prefix-caching"}))
    '--no-enable-prefix-caching'
    >>> respell_flag("--disable-prefix-caching", frozenset({"--disable-prefix-caching"}))
    '--disable-prefix-caching'
    """
    if arg in flags:
        return arg
    for spelt, other in (("--disable-", "--no-enable-"), ("--no-enable-", "--disable-")):
        if arg.startswith(spelt) and other + arg[len(spelt) :] in flags:
            return other + arg[len(spelt) :]
    return arg
