"""``tandem operator`` as a local process, restartable, with its CPU and memory. Does
process I/O.

For benches and fault tests that run the operator outside the cluster (as a developer
runs it against one) and kill or restart it on purpose. Its output goes to a log file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

TANDEM = Path(sys.executable).parent / "tandem"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(match[1]) / 1024 if match else 0.0


class OperatorProcess:
    """One operator, started again after each kill; CPU and peak RSS over all its lives."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu_s = 0.0
        self.peak_rss_mib = 0.0
        self.starts = 0

    def start(self) -> OperatorProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(TANDEM), "operator", *self.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            )
        self.starts += 1
        return self

    def sample(self) -> None:
        """Fold the running process's CPU and memory into the totals (call before it ends)."""
        if self.proc is not None and self.proc.poll() is None:
            self.peak_rss_mib = max(self.peak_rss_mib, peak_rss_mib(self.proc.pid))

    def current_cpu_s(self) -> float:
        """CPU of every life so far, the running one included."""
        live = cpu_s(self.proc.pid) if self.proc is not None and self.proc.poll() is None else 0
        return self.cpu_s + live

    def end(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60) -> int:
        """Send ``sig`` and wait; the exit status (SIGKILL after ``timeout_s``)."""
        proc = self.proc
        if proc is None:
            return 0
        self.sample()
        used = cpu_s(proc.pid)
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        self.cpu_s += used
        self.proc = None
        return int(proc.returncode)

    def restart(self, sig: signal.Signals) -> int:
        code = self.end(sig)
        self.start()
        return code
