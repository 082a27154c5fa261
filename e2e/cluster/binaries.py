"""Where the pinned control-plane programs are, and building them. Runs ``build.sh``.

``build.sh`` owns the cache layout (``~/.cache/tandem-e2e/<key>/bin``, the key naming
the pinned versions); this module only asks it for the key or runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "helm",
)
BUILD_COMMAND = "bash e2e/cluster/build.sh"


class BinariesMissing(RuntimeError):
    """The pinned programs are not built yet (the message says how to build them)."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the pinned programs."""

    bin_dir: Path

    def path(self, program: str) -> Path:
        if program not in PROGRAMS:
            raise KeyError(f"{program!r} is not one of the harness programs {PROGRAMS}")
        return self.bin_dir / program

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def helm(self) -> Path:
        return self.path("helm")


def cache_root() -> Path:
    return Path(os.environ.get("TANDEM_E2E_CACHE", Path.home() / ".cache" / "tandem-e2e"))


def cache_key() -> str:
    """The cache key of the pinned versions (from ``build.sh --print-key``)."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-key"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip()


def find_binaries() -> Binaries:
    """The built programs of the pinned versions; ``BinariesMissing`` if any is absent."""
    bin_dir = cache_root() / cache_key() / "bin"
    missing = [p for p in PROGRAMS if not os.access(bin_dir / p, os.X_OK)]
    if missing:
        raise BinariesMissing(
            f"the control-plane programs {', '.join(missing)} are not built in {bin_dir}; "
            f"build them with `{BUILD_COMMAND}` (from the repository root; the first build "
            "takes tens of minutes on 2 cores, later runs reuse the cache)"
        )
    return Binaries(bin_dir)


def build_binaries(timeout_s: float = 3600) -> Binaries:
    """Build (or reuse) the pinned programs, streaming the build's output to stderr
    (stdout is for the caller's own answer)."""
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, timeout=timeout_s, stdout=sys.stderr)
    return find_binaries()
