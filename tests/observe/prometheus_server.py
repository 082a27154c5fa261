"""A real Prometheus server on loopback for tests: temp config and storage, fast scrapes.

Uses the ``prometheus`` binary on PATH (Debian's package; ``.ci/run`` installs it). A
missing binary fails the test that needs it, with the command to install it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail(
            "the `prometheus` binary is not on PATH; these tests run a real Prometheus "
            "server. Install it with `apt-get install -y prometheus` (Debian/Ubuntu)."
        )
    return found


def write_config(path: Path, targets: Sequence[tuple[str, Mapping[str, str]]]) -> None:
    """A config scraping each ``host:port`` every second with its own target labels
    (JSON is valid YAML)."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "tandem",
                "static_configs": [
                    {"targets": [address], "labels": dict(labels)} for address, labels in targets
                ],
            }
        ],
    }
    path.write_text(json.dumps(config, indent=2))


def start_prometheus(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    log = (tmp_path / "prometheus.log").open("wb")
    with log:
        return subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop_prometheus(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def read_log(tmp_path: Path) -> str:
    return (tmp_path / "prometheus.log").read_text(errors="replace")


@asynccontextmanager
async def running_prometheus(
    tmp_path: Path, targets: Sequence[tuple[str, Mapping[str, str]]]
) -> AsyncIterator[str]:
    """Start Prometheus scraping ``targets``; yields its base URL once it is ready."""
    write_config(tmp_path / "prometheus.yml", targets)
    port = free_port()
    process = start_prometheus(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(url, process, tmp_path)
        yield url
    finally:
        stop_prometheus(process)


async def _wait_ready(url: str, process: subprocess.Popen[bytes], tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_TIMEOUT_S
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            if process.poll() is not None:
                pytest.fail(f"prometheus exited with {process.returncode}:\n{read_log(tmp_path)}")
            try:
                async with session.get(f"{url}/-/ready") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    pytest.fail(f"prometheus not ready within {STARTUP_TIMEOUT_S} s:\n{read_log(tmp_path)}")
