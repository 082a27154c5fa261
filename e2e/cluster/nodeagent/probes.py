"""Running a container's probes and counting their results as the kubelet does. Does
network and process I/O (``check``); ``ProbeTracker`` is pure bookkeeping over a clock.

HTTP and TCP probes go to the pod IP (a loopback address) unless the probe names a
host; exec probes run the command with the container's environment and mounts. No proxy
is ever used. gRPC probes are not supported: they fail with a message saying so.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from cluster.nodeagent.podspec import Probe

ExecRunner = Callable[[list[str], float], int]
"""(command, timeout seconds) -> exit status; runs inside the container's context."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str = ""


def check(probe: Probe, pod_ip: str, run_exec: ExecRunner) -> Outcome:
    """Run ``probe`` once (bounded by its timeout)."""
    host = probe.host or pod_ip
    try:
        if probe.kind == "http":
            conn: http.client.HTTPConnection
            if probe.scheme.upper() == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = http.client.HTTPSConnection(
                    host, probe.port, timeout=probe.timeout_s, context=ctx
                )
            else:
                conn = http.client.HTTPConnection(host, probe.port, timeout=probe.timeout_s)
            try:
                headers = {"User-Agent": "kube-probe/1.37", **dict(probe.headers)}
                conn.request("GET", probe.path, headers=headers)
                status = conn.getresponse().status
            finally:
                conn.close()
            return Outcome(200 <= status < 400, f"HTTP probe answered {status}")
        if probe.kind == "tcp":
            with socket.create_connection((host, probe.port), timeout=probe.timeout_s):
                return Outcome(True)
        if probe.kind == "exec":
            code = run_exec(list(probe.command), probe.timeout_s)
            return Outcome(code == 0, f"exec probe exited {code}")
        return Outcome(False, f"{probe.kind} probes are not supported by this node agent")
    except subprocess.TimeoutExpired:
        return Outcome(False, f"probe timed out after {probe.timeout_s:g} s")
    except (OSError, http.client.HTTPException) as err:
        return Outcome(False, f"probe failed: {err}")


@dataclass
class ProbeTracker:
    """Counts consecutive results of one probe; ``result`` flips after the thresholds."""

    probe: Probe
    next_due: float
    result: bool | None = None
    successes: int = 0
    failures: int = 0
    last_detail: str = ""
    pending: Future[Outcome] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, probe: Probe, container_started: float) -> ProbeTracker:
        return cls(probe, next_due=container_started + probe.initial_delay_s)

    def due(self, now: float) -> bool:
        return self.pending is None and now >= self.next_due

    def record(self, outcome: Outcome, now: float) -> bool | None:
        """Take one result; the new ``result`` (None until a threshold is reached)."""
        self.pending = None
        self.next_due = now + self.probe.period_s
        self.last_detail = outcome.detail
        if outcome.ok:
            self.successes += 1
            self.failures = 0
            if self.successes >= self.probe.success_threshold:
                self.result = True
        else:
            self.failures += 1
            self.successes = 0
            if self.failures >= self.probe.failure_threshold:
                self.result = False
        return self.result
