"""What each local engine "pod" runs: its command line and environment, built by the
cluster's own builders and adapted to one machine. Pure.

Two kinds of engine, chosen with ``tandem up --engine``:

* ``sim``: ``tandem engine sim`` with :func:`~tandem.manifests.vllm_args.build_sim_args`,
  plus the modelled cold start and the service's ``engine.shutdownTimeout``;
* ``vllm``: ``vllm serve`` with :func:`~tandem.manifests.vllm_args.build_vllm_args`,
  adapted for a CPU machine by :func:`~tandem.manifests.vllm_cpu.adapt_vllm_args_for_cpu`
  (the same adaptation the tests that run every example's arguments use), and the
  environment of :func:`build_vllm_env` (NIXL over UCX's TCP transport between prefill
  and decode, each engine's side channel on its own loopback port).

Every engine listens on 127.0.0.1 at a port chosen by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.manifests.vllm_args import build_sim_args, build_vllm_args, parse_model_uri
from tandem.manifests.vllm_cpu import adapt_vllm_args_for_cpu, drop_flags

VLLM_SITE = Path(__file__).resolve().parent / "vllmsite"
"""The folder whose ``sitecustomize`` the local vLLM engines load (NIXL's progress delay)."""
NIXL_DELAY_ENV = "TANDEM_NIXL_PROGRESS_DELAY_US"

EngineKind = Literal["sim", "vllm"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("sim", "vllm")
HOST = "127.0.0.1"

#: Set here for each engine, whatever the builders say: where it listens.
LOCAL_FLAGS: dict[str, int] = {"--host": 1, "--port": 1}


class LocalModelError(ValueError):
    """``model.uri`` names weights this machine cannot load; the message says what to use."""


@dataclass(frozen=True)
class EngineCommand:
    """One engine process: its full argv and the environment variables it adds."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    env_drop: tuple[str, ...] = ()
    """Prefixes of inherited variables to leave out: vLLM runs its own venv's Python,
    which must not see this one's (``VIRTUAL_ENV``, ``PYTHONPATH``, ...)."""


def check_local_model(uri: str) -> None:
    """Raise :class:`LocalModelError` unless real engines on this machine can load ``uri``:
    ``file:///abs/path`` (a model folder here) or ``hf://`` (vLLM downloads it).

    >>> check_local_model("file:///home/me/tiny-llama")
    >>> check_local_model("pvc://weights/llama")
    Traceback (most recent call last):
    ...
    tandem.local.engines.LocalModelError: spec.model.uri: 'pvc://weights/llama' is a volume claim in a cluster; with --engine vllm use file:///abs/path (a model folder on this machine, e.g. from `tandem engine tiny-model DIR`) or hf://org/name
    """  # noqa: E501
    scheme = uri.partition("://")[0]
    if scheme in ("file", "hf"):
        return
    what = "a volume claim in a cluster" if scheme == "pvc" else "object storage"
    raise LocalModelError(
        f"spec.model.uri: {uri!r} is {what}; with --engine vllm use file:///abs/path (a "
        "model folder on this machine, e.g. from `tandem engine tiny-model DIR`) or "
        "hf://org/name"
    )


def build_sim_command(
    isvc: InferenceService,
    role: PoolRole,
    port: int,
    cold_start_s: float,
    python: str,
) -> EngineCommand:
    """``python -m tandem.cli engine sim`` for ``role``: the cluster's arguments, listening
    here, with the modelled cold start and the service's drain time on SIGTERM.

    >>> from tandem.api.validate import load_inference_service
    >>> isvc = load_inference_service({"metadata": {"name": "a"}, "spec": {"model": {
    ...     "name": "m", "uri": "hf://o/n"}, "engine": {"backend": "sim"}}})
    >>> argv = build_sim_command(isvc, "decode", 8123, 5, "python3").argv
    >>> argv[:5], argv[-8:]
    (('python3', '-m', 'tandem.cli', 'engine', 'sim'), ('--host', '127.0.0.1', '--port', '8123', '--startup-delay', '5', '--shutdown-timeout', '30'))
    """  # noqa: E501
    args = drop_flags(build_sim_args(isvc, role), LOCAL_FLAGS)
    argv = (
        python, "-m", "tandem.cli", "engine", "sim", *args, "--log-level", "WARNING",
        "--host", HOST, "--port", str(port),
        "--startup-delay", f"{cold_start_s:g}",
        "--shutdown-timeout", f"{isvc.spec.engine.shutdown_timeout:g}",
    )  # fmt: skip
    return EngineCommand(argv=argv, env={})


def build_vllm_command(
    isvc: InferenceService,
    role: PoolRole,
    port: int,
    side_channel_port: int,
    vllm: str,
    base_env: Mapping[str, str],
    flags: frozenset[str] | None = None,
) -> EngineCommand:
    """``vllm serve`` for ``role`` on this machine, spelled for the vLLM whose serve flags
    are ``flags`` when known (raises :class:`LocalModelError` for a model it cannot load)."""
    check_local_model(isvc.spec.model.uri)
    args = drop_flags(build_vllm_args(isvc, role), LOCAL_FLAGS)
    args = adapt_vllm_args_for_cpu(args, flags)
    argv = (vllm, "serve", *args, "--host", HOST, "--port", str(port))
    local = parse_model_uri(isvc.spec.model.uri).local
    env = build_vllm_env(side_channel_port, base_env, local)
    return EngineCommand(argv=argv, env=env, env_drop=("VIRTUAL_ENV", "PYTHON"))


def build_vllm_env(
    side_channel_port: int, base_env: Mapping[str, str], offline: bool = True
) -> dict[str, str]:
    """What one ``vllm serve`` adds to the environment it inherits (``base_env``).

    Always: NIXL's side channel on 127.0.0.1 at ``side_channel_port`` (one per engine,
    so prefill and decode engines side by side do not collide), UCX over TCP, shared
    memory and self (no RDMA device on a laptop), vLLM's own address and no usage report.
    ``offline`` (a ``file://`` model): no model hub lookups. Defaults the user's own
    environment overrides: a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``, GiB; vLLM's
    default is a share of the machine's memory per engine, too much for several), one
    OpenMP thread per engine, no pinning to cores (vLLM pins every engine to the
    same cores otherwise), and a 1 ms pause between rounds of NIXL's progress thread
    (``TANDEM_NIXL_PROGRESS_DELAY_US``, applied by the ``sitecustomize`` of
    :data:`VLLM_SITE`, put first on ``PYTHONPATH``; NIXL 1.5 runs that thread without
    a pause, a whole core per idle prefill or decode engine).

    >>> env = build_vllm_env(5601, {"OMP_NUM_THREADS": "4", "PYTHONPATH": "/mine"})
    >>> env["VLLM_NIXL_SIDE_CHANNEL_PORT"], env["OMP_NUM_THREADS"], env["HF_HUB_OFFLINE"]
    ('5601', '4', '1')
    >>> env["PYTHONPATH"] == f"{VLLM_SITE}:/mine", env["TANDEM_NIXL_PROGRESS_DELAY_US"]
    (True, '1000')
    """
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        NIXL_DELAY_ENV: "1000",
    }
    env = {k: base_env.get(k, v) for k, v in env.items()}
    theirs = base_env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(VLLM_SITE), *([theirs] if theirs else [])])
    env.update(
        PYTHONUNBUFFERED="1",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_HOST_IP=HOST,
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        UCX_TLS="tcp,self,sm",
        VLLM_NIXL_SIDE_CHANNEL_HOST=HOST,
        VLLM_NIXL_SIDE_CHANNEL_PORT=str(side_channel_port),
    )
    if offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


@dataclass(frozen=True)
class EngineLaunch:
    """How a local fleet starts its engines: which kind, with which executable."""

    kind: EngineKind
    executable: str
    """``sim``: the Python that runs Tandem; ``vllm``: the ``vllm`` executable."""
    cold_start_s: float = 0.0
    """``sim`` only: the modelled start-up delay (a real engine takes its own)."""
    flags: frozenset[str] | None = None
    """``vllm`` only: the serve flags of the installed version, when Tandem knows them."""

    def command(
        self,
        isvc: InferenceService,
        role: PoolRole,
        port: int,
        side_channel_port: int,
        base_env: Mapping[str, str],
    ) -> EngineCommand:
        """The command of one engine of ``role`` listening on ``port``."""
        if self.kind == "sim":
            return build_sim_command(isvc, role, port, self.cold_start_s, self.executable)
        return build_vllm_command(
            isvc, role, port, side_channel_port, self.executable, base_env, self.flags
        )
