"""Local engine "pods": ``tandem engine sim`` child processes. Does I/O.

A pod is ready when its ``/health`` answers 200 (the engine answers 503 until its
start-up delay, the modelled cold start, has passed). Stopping sends SIGTERM so the
engine drains, then SIGKILL after a grace period; every child is reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from dataclasses import dataclass, field

import aiohttp


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class EnginePod:
    """One engine process of a pool."""

    name: str
    role: str
    port: int
    process: asyncio.subprocess.Process
    started_s: float
    ready: bool = False
    stopping: bool = False
    ready_s: float | None = field(default=None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


async def spawn_engine(name: str, role: str, args: list[str], now_s: float) -> EnginePod:
    """Start ``tandem engine sim ARGS`` on a free loopback port."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tandem.cli",
        "engine",
        "sim",
        *args,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal reaches only `tandem up`
    )
    return EnginePod(name=name, role=role, port=port, process=process, started_s=now_s)


async def check_ready(session: aiohttp.ClientSession, pod: EnginePod) -> bool:
    """Whether the pod's ``/health`` answers 200 now."""
    if not pod.alive:
        return False
    try:
        async with session.get(f"{pod.url}/health", timeout=aiohttp.ClientTimeout(total=1)) as r:
            return r.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def stop_engine(pod: EnginePod, grace_s: float = 10.0) -> None:
    """SIGTERM (drain), then SIGKILL after ``grace_s``; always reaps the process."""
    pod.stopping = True
    if pod.alive:
        with contextlib.suppress(ProcessLookupError):
            pod.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(pod.process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                pod.process.kill()
    await pod.process.wait()
