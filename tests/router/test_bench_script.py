"""``bench/router.py``'s guards: a proxy that exits mid-run stops the run with a message
naming it, and a run stops itself past the most it may take. Its figures come from runs of
minutes; these run in milliseconds."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
from types import ModuleType

import aiohttp
import pytest

from tests.support.bench import load_bench_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("router")


def test_the_cpu_of_a_process_that_exited_is_a_named_error(bench: ModuleType) -> None:
    user, system = bench.cpu_times(os.getpid())
    assert user >= 0 and system >= 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its /proc entry is gone, as a dead proxy's is
    with pytest.raises(bench.ProxyGone, match=f"process {gone.pid} exited"):
        bench.cpu_seconds(gone.pid)


@pytest.mark.parametrize(
    ("levels", "proxies", "warmup", "duration", "expected"),
    [
        (3, 2, 4.0, 12.0, 3 * 3 * 2 * 76.0 + 300.0),  # the default run
        (1, 1, 2.5, 5.0, 1 * 2 * 2 * 67.5 + 300.0),  # --quick --levels 50 --no-baseline
    ],
)
def test_a_run_has_a_deadline_from_its_windows(
    bench: ModuleType, levels: int, proxies: int, warmup: float, duration: float, expected: float
) -> None:
    assert bench.run_deadline_s(levels, proxies, warmup, duration) == expected


def test_a_client_of_a_dead_proxy_pauses_between_failures(bench: ModuleType) -> None:
    """Against a closed port a request fails at once; without the pause a client would
    send thousands a second, a busy loop at the bench's real-time priority."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    cfg = argparse.Namespace(prompt_words=4, max_tokens=4, warmup=0.0)
    level = bench.Level()

    async def run() -> None:
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as session:
            client = asyncio.create_task(bench.load_client(session, url, stop, level, cfg, 1))
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.wait_for(client, 5)

    asyncio.run(run())
    assert 1 <= level.errors <= 0.5 / bench.ERROR_PAUSE_S + 1
    assert level.requests == 0
