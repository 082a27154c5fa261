"""One container of a process-backed pod: its process, restarts, probes and hooks. Does
process and network I/O; the API is not touched here (the pod runner writes status).

A container's process runs in a session of its own, so stopping it signals everything it
started. Restarts follow ``restartPolicy`` with the kubelet's back-off: the first at
once, then ``restart_backoff_s`` doubling up to 300 s, reset once a run lasted 10
minutes. Probes run on a shared pool and are read back on the next tick, so a slow probe
never delays a deletion. A failed startup or liveness probe stops the container as the
kubelet does (preStop hook, SIGTERM, SIGKILL after the grace period), then the restart
policy applies.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.images import ImageNotRunnable, resolve_hook
from cluster.nodeagent.podspec import Probe, SpecError, expand, localize, parse_probe, resolve_port
from cluster.nodeagent.podstatus import ContainerRun, now_rfc3339
from cluster.nodeagent.probes import Outcome, ProbeTracker, check
from cluster.nodeagent.volumes import Mount, wrap_with_mounts
from cluster.spawn import Spawner, signal_group

log = logging.getLogger("cluster.nodeagent")

BACKOFF_CAP_S = 300.0
BACKOFF_RESET_S = 600.0
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@dataclass
class Launch:
    """How to run one container, resolved from the pod (see ``PodRunner._prepare``)."""

    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    keep: list[Path] = field(default_factory=list)
    """Host paths the mounts must not hide (``images.image_paths``)."""


@dataclass
class Container:
    """The state of one container across its restarts."""

    spec: dict[str, Any]
    pod: str
    """``namespace/name``, for logs."""
    ip: str
    pod_dir: Path
    restart_policy: str
    grace_s: float
    restart_backoff_s: float
    spawner: Spawner
    probe_pool: ThreadPoolExecutor
    launch: Launch | None = None
    run: ContainerRun = field(init=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    started_mono: float = field(default=0.0, init=False)
    restart_at: float | None = field(default=None, init=False)
    trackers: dict[str, ProbeTracker] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.run = ContainerRun(self.spec["name"], self.spec.get("image", ""))

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    # -- the process ----------------------------------------------------------------------

    def start(self) -> None:
        if self.launch is None:
            raise RuntimeError(f"container {self.name} started before it was prepared")
        run = self.run
        log_path = self.pod_dir / f"{self.name}.log"
        with log_path.open("a") as f:
            f.write(f"==== {now_rfc3339()} start #{run.restart_count}: {self.launch.argv}\n")
        cwd = self.spec.get("workingDir")
        try:
            proc = self.spawner.spawn(
                wrap_with_mounts(self.launch.argv, self.launch.mounts, self.launch.keep),
                log_path=log_path,
                env=self.launch.env,
                cwd=Path(cwd) if cwd and Path(cwd).is_dir() else self.pod_dir,
            )
        except OSError as err:
            run.reason, run.message, run.exit_code = "RunContainerError", str(err), 128
            self.exited(time.monotonic(), code=128, started=False)
            return
        now = time.monotonic()
        self.proc, self.started_mono = proc, now
        # The process group of this run, for tests that crash a container (Cluster.kill).
        (self.pod_dir / f"{self.name}.pid").write_text(f"{proc.pid}\n")
        run.state, run.reason, run.message = "running", "", ""
        run.started_at = now_rfc3339()
        self.trackers = {}
        for kind in PROBES:
            probe = parse_probe(self.spec, self.spec.get(kind))
            if probe is not None:
                self.trackers[kind] = ProbeTracker.start(probe, now)
        run.started = "startupProbe" not in self.trackers
        run.ready = run.started and "readinessProbe" not in self.trackers

    def exited(self, now: float, *, code: int, started: bool = True, final: bool = False) -> None:
        """Record an exit with status ``code`` (negative: killed by that signal); schedule
        the restart the policy asks for unless ``final``."""
        run = self.run
        self.proc = None
        # A process killed by a signal reports 128 + the signal, as a container runtime does.
        run.exit_code = 128 - code if code < 0 else code
        run.finished_at = now_rfc3339()
        if started:
            run.reason, run.message = ("Completed" if run.exit_code == 0 else "Error"), ""
        run.state, run.ready, run.started = "terminated", False, False
        for tracker in self.trackers.values():
            if tracker.pending is not None:
                tracker.pending.cancel()
        self.trackers = {}
        policy = self.restart_policy
        if final or policy == "Never" or (policy == "OnFailure" and run.exit_code == 0):
            run.done = True
            self.restart_at = None
            return
        ran_s = now - self.started_mono if started else 0.0
        if ran_s >= BACKOFF_RESET_S or run.restart_count == 0:
            delay = 0.0
        else:
            delay = min(self.restart_backoff_s * 2 ** (run.restart_count - 1), BACKOFF_CAP_S)
        run.last_terminated = run.terminated()
        self.restart_at = now + delay
        if delay > 0:
            run.state = "waiting"
            run.reason = "CrashLoopBackOff"
            run.message = (
                f"back-off {delay:g}s restarting failed container={self.name} pod={self.pod}"
            )

    def tick(self, now: float) -> None:
        """Notice an exit, restart when due, run and read probes."""
        proc = self.proc
        if proc is not None and proc.poll() is not None:
            log.info("pod %s: container %s exited %s", self.pod, self.name, proc.returncode)
            self.exited(now, code=proc.returncode)
        if self.proc is None and self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            self.run.restart_count += 1
            self.start()
        if self.proc is not None:
            self._probe(now)

    def stop(self, grace_s: float, *, hooks: bool) -> None:
        """preStop (if ``hooks``), SIGTERM, SIGKILL when ``grace_s`` has passed; final."""
        proc = self.proc
        if proc is not None:
            self._signal_and_wait(proc, grace_s, hooks)
            self.exited(time.monotonic(), code=proc.returncode or 0, final=True)
        else:
            self.run.done = True
            self.restart_at = None
            if self.run.state != "terminated":
                self.run.state = "terminated"
                self.run.finished_at = self.run.finished_at or now_rfc3339()

    def _signal_and_wait(self, proc: subprocess.Popen[bytes], grace_s: float, hooks: bool) -> None:
        deadline = time.monotonic() + grace_s
        if hooks:
            self._pre_stop(deadline)
        signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
        # The whole group: children the program started must not outlive the container.
        signal_group(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("pod %s: process %d survived SIGKILL", self.pod, proc.pid)

    # -- probes and hooks -------------------------------------------------------------------

    def _probe(self, now: float) -> None:
        run = self.run
        for kind, tracker in list(self.trackers.items()):
            if (kind == "startupProbe") == run.started:
                continue  # startup probes until started, the others after
            if tracker.pending is not None and tracker.pending.done():
                try:
                    outcome = tracker.pending.result()
                except Exception as err:
                    outcome = Outcome(False, f"probe raised {err}")
                result = tracker.record(outcome, now)
                if kind == "startupProbe" and result:
                    run.started = True
                    run.ready = "readinessProbe" not in self.trackers
                    for other in ("livenessProbe", "readinessProbe"):
                        if other in self.trackers:
                            t = self.trackers[other]
                            t.next_due = now + t.probe.initial_delay_s
                elif kind == "readinessProbe" and result is not None:
                    run.ready = result
                elif result is False:
                    log.info(
                        "pod %s: container %s failed its %s (%s); restarting it",
                        self.pod,
                        self.name,
                        kind,
                        tracker.last_detail,
                    )
                    proc = self.proc
                    if proc is not None:
                        self._signal_and_wait(proc, self.grace_s, hooks=True)
                    return
            if tracker.due(now):
                tracker.pending = self.probe_pool.submit(check, tracker.probe, self.ip, self.exec)

    def exec(self, command: list[str], timeout_s: float) -> int:
        """Run ``command`` as this container's exec hook or probe (its environment and
        mounts, localhost meaning the pod IP); its exit status."""
        if self.launch is None:
            raise RuntimeError(f"container {self.name} is not prepared")
        env = self.launch.env
        argv = [localize(expand(a, env), self.ip) for a in resolve_hook(self.run.image, command)]
        proc = self.spawner.spawn(
            wrap_with_mounts(argv, self.launch.mounts, self.launch.keep),
            log_path=self.pod_dir / f"{self.name}.exec.log",
            env=env,
            cwd=self.pod_dir,
        )
        try:
            return proc.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise

    def _pre_stop(self, deadline: float) -> None:
        hook = (self.spec.get("lifecycle") or {}).get("preStop")
        if not hook:
            return
        remaining = deadline - time.monotonic()
        t0 = time.monotonic()
        try:
            if "exec" in hook:
                code = self.exec(list(hook["exec"].get("command", [])), remaining)
                detail = f"exited {code}"
            elif "httpGet" in hook:
                h = hook["httpGet"]
                probe = Probe(
                    kind="http",
                    port=resolve_port(self.spec, h["port"]),
                    path=str(h.get("path", "/")),
                    host=str(h.get("host", "")),
                    scheme=str(h.get("scheme", "HTTP")),
                    timeout_s=max(remaining, 0.1),
                )
                detail = check(probe, self.ip, lambda _c, _t: 0).detail
            elif "sleep" in hook:
                time.sleep(min(float(hook["sleep"]["seconds"]), max(remaining, 0)))
                detail = "slept"
            else:
                detail = f"unsupported hook {sorted(hook)}"
        except subprocess.TimeoutExpired:
            detail = "ran past the grace period"
        except (OSError, SpecError, ImageNotRunnable) as err:
            detail = f"failed: {err}"
        log.info(
            "pod %s: container %s preStop %s after %.1f s",
            self.pod,
            self.name,
            detail,
            time.monotonic() - t0,
        )
