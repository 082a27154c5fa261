"""Starting and stopping the harness's child processes. Does process I/O.

Every child runs in a session (and so a process group) of its own, with its output in a
log file, and is stopped by signalling the whole group: SIGTERM, then SIGKILL when it
has not exited within the grace period.

Children also get a parent-death signal (``setpriv --pdeathsig``): when the process that
started them dies without stopping them (killed, crashed), they receive SIGTERM instead
of running on. Linux sends that signal when the *thread* that forked the child exits, so
all forks go through one long-lived thread (``Spawner``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

SETPRIV = shutil.which("setpriv")
RUN_ENV = "TANDEM_E2E_RUN"
"""Set to the run's state directory in the environment of everything a run starts
(components, node agent, pods' processes), so ``down`` can prove nothing outlived it."""


class Spawner:
    """Starts processes from one dedicated thread (see the module docstring)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spawner")

    def spawn(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` with stdout and stderr appended to ``log_path``."""
        return self._pool.submit(_spawn, list(argv), log_path, env, cwd).result(timeout=30)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _spawn(
    argv: list[str], log_path: Path, env: Mapping[str, str] | None, cwd: Path | None
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``pid``; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop(proc: subprocess.Popen[bytes], grace_s: float) -> int | None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``; the exit status.

    Kills the rest of the group too when the leader exited on SIGTERM but left children.
    """
    if proc.poll() is None and grace_s > 0:
        signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    signal_group(proc.pid, signal.SIGKILL)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Poll until ``pid`` has exited (for processes this one did not start)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def processes_of_run(state_dir: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment names ``state_dir``
    as its run (``RUN_ENV``); this process excluded."""
    marker = f"{RUN_ENV}={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in environ and pid_alive(int(entry.name)):
            found.append((int(entry.name), cmdline.strip()))
    return found


def kill_leftovers(state_dir: Path) -> list[str]:
    """SIGKILL every process of the run still alive (and its group); what was found."""
    found = processes_of_run(state_dir)
    for pid, _ in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        signal_group(pid, signal.SIGKILL)
    return [f"{pid} {cmd[:160]}" for pid, cmd in found]
