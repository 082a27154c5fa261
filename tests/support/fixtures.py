"""Starting the emulated API server on loopback for a test or a benchmark. Does I/O.

``serve_emulator()`` gives an :class:`Emulator` with every resource Tandem uses registered
and a URL (``emulator_url(k)``) that any client can reach; one instance per test keeps
request logs short and tests independent.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kmock

from tests.support.kube_emulator import Emulator, register_resources


@contextlib.asynccontextmanager
async def serve_emulator(*, monitoring: bool = True, **kwargs: Any) -> AsyncIterator[Emulator]:
    """An emulator served on 127.0.0.1 at a free port, for the duration of the block."""
    async with Emulator(**kwargs) as emulator, kmock.Server(emulator):
        register_resources(emulator, monitoring=monitoring)
        try:
            yield emulator
        finally:
            emulator.cut_watches(abort=True)


def emulator_url(emulator: Emulator) -> str:
    """``http://127.0.0.1:PORT`` (no trailing slash)."""
    return str(emulator.url).rstrip("/")


@contextlib.contextmanager
def kubeconfig_for(url: str, namespace: str = "default") -> Iterator[str]:
    """A kubeconfig file pointing at ``url`` (for subprocesses: kubectl, ``tandem``)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "emulator", "user": {"token": "emulator"}}],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
            }
        ],
        "current-context": "emulator",
    }
    fd, path = tempfile.mkstemp(prefix="kubeconfig-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    try:
        yield path
    finally:
        os.unlink(path)
