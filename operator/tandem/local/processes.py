"""Local engine "pods": engine child processes, started, checked and stopped. Does I/O.

A pod is ready when its ``/health`` answers 200 (the simulated engine answers 503 until
its start-up delay, the modelled cold start, has passed; vLLM refuses connections until
its engine is up), and stays ready until several checks in a row fail, as the engines'
readiness probe has it (a busy engine answers slowly; it is not gone). Each pod runs
in a process group of its own (vLLM's API server has an engine-core child), which is
killed whole at the end, and dies with ``tandem up`` if that is killed outright.

Stopping a pod is the cluster's pod termination, step for step (:func:`stop_engine`):
the caller has already taken it out of the router; the engines' own ``preStop`` drain
(:mod:`tandem.manifests.drain`, the same script) waits until its running and waiting
requests reach 0, for at most ``engine.shutdownTimeout``; then SIGTERM starts the
engine's own drain (``--shutdown-timeout``); SIGKILL comes only when the termination
grace period (:func:`~tandem.manifests.drain.compute_grace_period_s`) has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

from tandem.api.vocab import PoolRole
from tandem.manifests.drain import build_drain_command, compute_grace_period_s

#: Seconds a pod taken out of the router keeps serving before its drain starts. The
#: cluster waits 5 s for endpoints to catch up; here the router is in the same process
#: and forgets the pod at once, so this only covers requests already on their way.
LOCAL_SETTLE_S = 1.0


#: Ports this process handed out (each engine's, bound later): never handed out twice.
_HANDED_OUT: set[int] = set()
#: How many ports below the kernel's ephemeral range :func:`free_port` draws from.
PORT_SPAN = 12_000


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, drawn below the kernel's ephemeral range
    and never handed out before by this process.

    A vLLM engine binds its HTTP port and NIXL side channel tens of seconds after it is
    given them; a port from the ephemeral range (what binding port 0 gives) can be taken
    meanwhile by any outgoing connection or by another engine's own internal sockets, and
    the engine then fails with "Address already in use".
    """
    low = ephemeral_low()
    first = max(1024, low - PORT_SPAN)
    rng = random.Random()
    for _ in range(200 if first < low else 0):
        port = rng.randrange(first, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False)
class EnginePod:
    """One engine process of a pool."""

    name: str
    role: PoolRole
    port: int
    process: asyncio.subprocess.Process
    started_s: float
    log_path: Path | None = None
    ready: bool = False
    failed_checks: int = 0
    """Health checks failed in a row since the last good one."""
    stopping: bool = False
    ready_s: float | None = field(default=None)
    ended_s: float | None = field(default=None)
    """When the process was reaped (the end of the pod's life)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the pod's log, for an error message."""
        if self.log_path is None:
            return "(no log: run with --log-dir DIR to keep the engines' output)"
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as err:
            return f"(no log: {err})"
        return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """Linux: the engine gets SIGKILL when ``tandem up`` dies without cleaning up (vLLM's
    engine core watches its own parent and follows)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def spawn_engine(
    name: str,
    role: PoolRole,
    argv: Sequence[str],
    env: Mapping[str, str],
    port: int,
    now_s: float,
    log_path: Path | None = None,
    env_drop: tuple[str, ...] = (),
) -> EnginePod:
    """Start ``argv`` (an engine listening on ``port``) with ``env`` added to this
    process's environment less the variables starting with ``env_drop``, its output to
    ``log_path`` (or nowhere)."""
    full_env = {k: v for k, v in os.environ.items() if not (env_drop and k.startswith(env_drop))}
    full_env.update(env)
    out: int | IO[bytes] = asyncio.subprocess.DEVNULL
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        out = log
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=full_env,
            start_new_session=True,  # its own group: Ctrl-C reaches only `tandem up`
            preexec_fn=_die_with_parent,
        )
    finally:
        if not isinstance(out, int):
            out.close()  # the child holds its own descriptor
    return EnginePod(
        name=name, role=role, port=port, process=process, started_s=now_s, log_path=log_path
    )


async def check_health(session: aiohttp.ClientSession, pod: EnginePod, timeout_s: float) -> bool:
    """Whether the pod's ``/health`` answers 200 within ``timeout_s`` now."""
    if not pod.alive:
        return False
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.get(f"{pod.url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def drain_engine(pod: EnginePod, settle_s: float, bound_s: float) -> None:
    """Run the engines' ``preStop`` hook against the pod: after ``settle_s``, wait until
    its running and waiting requests reach 0, at most ``bound_s``."""
    if not pod.alive:
        return
    _, *args = build_drain_command(pod.port, settle_s, bound_s)
    hook = await asyncio.create_subprocess_exec(
        sys.executable, *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await hook.wait()
    finally:
        if hook.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                hook.kill()
            await hook.wait()


async def stop_engine(
    pod: EnginePod,
    shutdown_timeout_s: float,
    settle_s: float = LOCAL_SETTLE_S,
    drain: bool = True,
) -> None:
    """Terminate the pod as the kubelet would: the ``preStop`` drain (when ``drain``),
    SIGTERM, SIGKILL once the grace period has passed; always reaps the process group.

    ``drain=False`` (everything is stopping, nothing routes any more) skips the hook and
    gives the engine 5 s after SIGTERM.
    """
    pod.stopping = True
    started = time.monotonic()
    grace_s = compute_grace_period_s(settle_s, shutdown_timeout_s) if drain else 5.0
    if drain:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drain_engine(pod, settle_s, shutdown_timeout_s), grace_s)
    if pod.alive:
        with contextlib.suppress(ProcessLookupError):
            pod.process.send_signal(signal.SIGTERM)
        left = max(grace_s - (time.monotonic() - started), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pod.process.wait(), left)
    # The group: vLLM's engine core and workers outlive a killed API server otherwise.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pod.process.pid, signal.SIGKILL)
    await pod.process.wait()
