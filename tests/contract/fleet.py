"""The engines the contract tests talk to: ``tandem engine sim`` and real ``vllm serve``
(CPU build), behind one interface. Does I/O: processes and HTTP on 127.0.0.1.

:class:`Fleet` starts an engine the first time a test asks for it by (kind, name) and
keeps it for the rest of the session: a real engine costs about a minute to start on two
cores, so the contract modules share theirs; a test that kills one restarts it on the same
ports (:meth:`Fleet.restart`) or retires it (:meth:`Fleet.retire`). Every real engine runs
with ``--scheduling-policy priority`` (the router's priority classes need it) and
``--shutdown-timeout 30`` (the drain test), exports its spans to the session's OTLP
collector when there is one (the tracing test), and at most four run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tests.vllm.engines import (
    SERVED_NAME,
    VLLM_VERSION,
    Role,
    VllmEngine,
    VllmInstall,
    free_port,
    spawn_engine,
)

Kind = Literal["sim", "vllm"]
KINDS: tuple[Kind, ...] = ("sim", "vllm")
SIM_VERSION = "0.34.0"
"""The simulated engine follows the vLLM version Tandem pins."""
MAX_MODEL_LEN = 2048
SHUTDOWN_TIMEOUT_S = 30
COMMON_FLAGS = ("--scheduling-policy", "priority", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S))
#: Flags of the engines a test asks for by these names, on top of the common ones.
NAMED_FLAGS: dict[str, tuple[str, ...]] = {
    # a decode engine whose admission control refuses every request: vLLM's overload 503
    "decode-full": ("--max-num-queued-reqs", "0"),
}
START_TIMEOUT_S = {"sim": 30.0, "vllm": 300.0}


@dataclass
class Engine:
    """One engine of either kind, as the tests see it."""

    kind: Kind
    name: str
    role: Role
    port: int
    kv_port: int
    """``remote_port`` a prefill engine advertises: vLLM's NIXL side channel; the sim's
    HTTP port (its KV pulls are HTTP)."""
    process: subprocess.Popen[bytes]
    log_path: Path
    real: VllmEngine | None = None
    started_s: float = field(default_factory=time.monotonic)
    startup_s: float | None = None

    @property
    def version(self) -> str:
        """The vLLM version whose behaviour this engine has."""
        return VLLM_VERSION if self.kind == "vllm" else SIM_VERSION

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as err:
            return f"(no log: {err})"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float | None = None) -> None:
        deadline = self.started_s + (timeout_s or START_TIMEOUT_S[self.kind])
        while not self.healthy():
            if not self.alive:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} during "
                                   f"start:\n{self.log_tail()}")  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not healthy in time:\n{self.log_tail()}")
            time.sleep(0.2 if self.kind == "sim" else 0.5)
        self.startup_s = time.monotonic() - self.started_s

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL the whole engine (a vLLM API server with its engine core and worker)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            import os

            os.killpg(self.process.pid, signal.SIGKILL)
        self.wait_exit(10.0)

    def wait_exit(self, timeout_s: float) -> int | None:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 40.0) -> None:
        if self.alive:
            self.signal(signal.SIGTERM)
            self.wait_exit(grace_s)
        self.kill()


def _die_with_parent() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn_sim(name: str, role: Role, log_dir: Path, ports: tuple[int, int] | None = None) -> Engine:
    """``tandem engine sim`` with the real engines' served name, length and flags."""
    port = ports[0] if ports else free_port()
    args = ["--role", role, "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", SERVED_NAME, "--max-model-len", str(MAX_MODEL_LEN),
            *COMMON_FLAGS, *NAMED_FLAGS.get(name, ())]  # fmt: skip
    return spawn_sim_args(name, role, args, log_dir, port)


def spawn_sim_args(name: str, role: Role, args: list[str], log_dir: Path, port: int) -> Engine:
    """``tandem engine sim`` with exactly ``args`` (which make it listen on ``port``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"sim-{name}.log"
    command = [sys.executable, "-m", "tandem.cli", "engine", "sim", *args]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
    return Engine("sim", name, role, port, port, process, log_path)


def warm_handshakes(engines: Iterable[Engine], served: str = SERVED_NAME) -> None:
    """One handoff from each prefill engine to each decode engine among ``engines``, tried
    up to three times until the KV moves.

    A decode engine's first pull from a prefill engine starts with a NIXL handshake over
    the side channel, which vLLM gives a fixed 5 s to answer; with several CPU engines on
    two cores that first answer can come later, and the request is computed locally
    instead. The handshake's result is kept for later requests, so the tests see the
    handoff as a warm engine does. Best effort: a test whose KV does not move still fails.
    """
    for prefill, decode in pd_pairs(engines):
        for _ in range(3):
            if _one_handoff(prefill, decode, served):
                break


def pd_pairs(engines: Iterable[Engine]) -> list[tuple[Engine, Engine]]:
    """Every (prefill, decode) pair among ``engines``."""
    engines = list(engines)
    prefills = [e for e in engines if e.role == "prefill"]
    return [(p, d) for p in prefills for d in engines if d.role == "decode"]


def _one_handoff(prefill: Engine, decode: Engine, served: str) -> bool:
    """Whether a one-token handoff from ``prefill`` to ``decode`` moved the KV."""
    handoff = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
               "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
    body = {"model": served, "prompt": "Warm the side channel, please. " * 8,
            "max_tokens": 1}  # fmt: skip
    try:
        params = _post(prefill.url + "/v1/completions", {**body, "kv_transfer_params": handoff})
        before = _external_tokens(decode)
        _post(decode.url + "/v1/completions", {**body, "kv_transfer_params":
                                               params.get("kv_transfer_params")})  # fmt: skip
        return _external_tokens(decode) > before
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as resp:
        answer = json.loads(resp.read())
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    return answer


def _external_tokens(engine: Engine) -> float:
    with urllib.request.urlopen(engine.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:prompt_tokens_by_source_total")
        and 'source="external_kv_transfer"' in line
    )


class Fleet:
    """Engines by (kind, name), started on first use, all stopped by :meth:`close`."""

    def __init__(
        self,
        log_dir: Path,
        install: Callable[[], tuple[VllmInstall, Path]],
        traces_url: str | None = None,
    ) -> None:
        """``traces_url``: real engines export their spans there (OTLP/HTTP)."""
        self.log_dir = log_dir
        self._install = install
        self.traces_url = traces_url
        self.engines: dict[tuple[Kind, str], Engine] = {}
        self.startups: list[tuple[str, float]] = []
        self.warm: set[tuple[str, str]] = set()
        """(prefill, decode) names of the real engines whose handshake is held."""

    def get(self, kind: Kind, roles: dict[str, Role]) -> dict[str, Engine]:
        """The engines named in ``roles`` (``{"prefill": "prefill", ...}``) of ``kind``,
        started side by side if they are not running yet."""
        missing = {n: r for n, r in roles.items() if (kind, n) not in self.engines}
        started = [self._spawn(kind, name, role) for name, role in missing.items()]
        try:
            for engine in started:
                engine.wait_ready()
        except RuntimeError:
            for engine in started:
                engine.stop(5.0)
                del self.engines[(kind, engine.name)]
            raise
        for engine in started:
            self.startups.append((f"{kind}:{engine.name}", engine.startup_s or 0.0))
        found = {name: self.engines[(kind, name)] for name in roles}
        if kind == "vllm":
            self._warm(found.values())
        return found

    def _warm(self, engines: Iterable[Engine]) -> None:
        """Warm the pairs among ``engines`` not warmed since either engine (re)started:
        a test after one that restarted an engine sees its handoff as warm as before."""
        for prefill, decode in pd_pairs(engines):
            if (prefill.name, decode.name) not in self.warm:
                warm_handshakes([prefill, decode])
                self.warm.add((prefill.name, decode.name))

    def _cold(self, engine: Engine) -> None:
        """``engine`` stopped: its pairs' handshakes are gone."""
        self.warm = {pair for pair in self.warm if engine.name not in pair}

    def _spawn(self, kind: Kind, name: str, role: Role, ports: tuple[int, int] | None = None
               ) -> Engine:  # fmt: skip
        if kind == "sim":
            engine = spawn_sim(name, role, self.log_dir, ports)
        else:
            install, model = self._install()
            extra, env = COMMON_FLAGS, None
            if self.traces_url is not None:
                extra += ("--otlp-traces-endpoint", self.traces_url)
                env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                       "OTEL_SERVICE_NAME": f"vllm-{name}"}  # fmt: skip
            real = spawn_engine(install, model, role, self.log_dir, name=f"vllm-{name}",
                                extra=extra + NAMED_FLAGS.get(name, ()),
                                ports=ports, env=env)  # fmt: skip
            engine = Engine("vllm", name, role, real.port, real.side_channel_port,
                            real.process, real.log_path, real)  # fmt: skip
        self.engines[(kind, name)] = engine
        return engine

    async def restart(self, engine: Engine) -> Engine:
        """Stop ``engine`` if it still runs, start it again on the same ports; ready.

        The process is spawned on the calling (main) thread: a child's parent-death signal
        follows the thread that forked it, and an executor thread ends with its loop."""
        engine.stop(5.0)
        self._cold(engine)
        again = self._spawn(engine.kind, engine.name, engine.role, (engine.port, engine.kv_port))
        await asyncio.to_thread(again.wait_ready)
        self.startups.append((f"{engine.kind}:{engine.name} (restart)", again.startup_s or 0.0))
        return again

    def retire(self, engine: Engine) -> None:
        """Forget ``engine`` (a test ended it); a later :meth:`get` starts a new one."""
        engine.stop(5.0)
        self.engines.pop((engine.kind, engine.name), None)
        self._cold(engine)

    def close(self) -> None:
        engines = list(self.engines.values())
        for engine in engines:
            engine.signal(signal.SIGTERM)
        for engine in engines:
            engine.stop()
        self.engines.clear()
        self.warm.clear()
