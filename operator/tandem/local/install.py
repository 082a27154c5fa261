"""Finding vLLM on this machine, and writing the tiny model with its Python. Does I/O
(the file system, a child process).

``tandem up --engine vllm`` and ``tandem engine tiny-model`` take the ``vllm``
executable (``--vllm``, default ``vllm`` on PATH). vLLM lives in a virtualenv of its own
(``bash .ci/install-vllm`` makes one for its CPU build): the ``python`` beside that
executable has torch and transformers, which :mod:`tandem.engine.tinymodel` needs and
Tandem itself does not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = (
    "install vLLM's CPU build with `bash .ci/install-vllm` (from a clone of Tandem) and "
    "pass the `VLLM=` path it prints as --vllm, or put `vllm` on PATH"
)


class VllmNotFound(Exception):
    """No usable ``vllm`` executable; the message says how to get one."""


@dataclass(frozen=True)
class VllmInstall:
    """A ``vllm`` executable and the Python of its virtualenv."""

    vllm: Path
    python: Path
    version: str | None = None
    """The installed vLLM's version (``0.32.0+cpu``), read from its package metadata."""

    @property
    def flag_list(self) -> str | None:
        """The name of its packaged ``serve_flags`` list (``0.32.0-cpu``), if any."""
        return None if self.version is None else self.version.replace("+", "-")


def find_vllm(given: str) -> VllmInstall:
    """The install of the ``vllm`` executable ``given`` (a path, or a name on PATH)."""
    found = shutil.which(given)
    if found is None:
        raise VllmNotFound(f"--vllm {given}: no such executable; {INSTALL_HINT}")
    vllm = Path(found).absolute()
    python = vllm.parent / "python"
    if not python.is_file():
        raise VllmNotFound(f"--vllm {given}: no python beside it in {vllm.parent}; {INSTALL_HINT}")
    return VllmInstall(vllm, python, read_version(vllm.parent.parent))


def read_version(venv: Path) -> str | None:
    """The version in the ``vllm`` package metadata of ``venv`` (no import: importing
    vLLM takes seconds), or None."""
    for meta in sorted(venv.glob("lib/python3*/site-packages/vllm-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version: "):
                return line.removeprefix("Version: ").strip()
    return None


def write_tiny_model(install: VllmInstall, out: Path, force: bool = False) -> str:
    """Run :mod:`tandem.engine.tinymodel` with the install's Python (this package on its
    path, from wherever it is installed); its last line, ``PATH (written in Ns)`` or
    ``PATH (up to date)``. RuntimeError with its output when it fails."""
    import tandem

    package_parent = Path(tandem.__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PYTHONPATH"] = str(package_parent)
    argv = [str(install.python), "-m", "tandem.engine.tinymodel", str(out)]
    if force:
        argv.append("--force")
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(
            f"the tiny model writer failed ({run.returncode}):\n{run.stderr.strip()}"
        )
    return run.stdout.strip().splitlines()[-1]
