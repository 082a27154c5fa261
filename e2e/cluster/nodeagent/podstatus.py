"""A pod's ``status`` as the kubelet writes it, from what the node agent knows. Pure.

The kubelet's rules: ``Initialized`` once init containers are done (there are none or
they exited 0); ``ContainersReady`` when every container is ready; ``Ready`` when
containers are ready and every readiness gate's condition is True; phase ``Running``
while any container runs or restarts, ``Succeeded``/``Failed`` once all have terminated
for good. A condition's ``lastTransitionTime`` moves only when its status changes, so
an unchanged pod yields an identical status (and the agent writes nothing).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    """What the agent knows of one container (updated by the runner)."""

    name: str
    image: str
    state: str = "waiting"
    """waiting, running or terminated."""
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    last_terminated: dict[str, Any] | None = None
    done: bool = False
    """Terminated and will not be restarted (restart policy)."""

    def as_status(self) -> dict[str, Any]:
        state: dict[str, Any]
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": self.terminated()}
        else:
            waiting: dict[str, Any] = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            state = {"waiting": waiting}
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": f"process://{self.name}-{self.restart_count}",
            "state": state,
            "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
        }
        return status

    def terminated(self) -> dict[str, Any]:
        t: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at or None,
            "finishedAt": self.finished_at,
            "containerID": f"process://{self.name}-{self.restart_count}",
        }
        if self.message:
            t["message"] = self.message
        return t


@dataclass
class Conditions:
    """Pod conditions with stable transition times."""

    times: dict[str, tuple[str, str]] = field(default_factory=dict)

    def set(self, kind: str, status: bool, reason: str = "") -> dict[str, Any]:
        value = "True" if status else "False"
        previous = self.times.get(kind)
        if previous is None or previous[0] != value:
            self.times[kind] = (value, now_rfc3339())
        cond: dict[str, Any] = {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": self.times[kind][1],
        }
        if reason and not status:
            cond["reason"] = reason
        return cond


def compute_phase(runs: list[ContainerRun]) -> str:
    """Pending before any container started; Succeeded/Failed once all are done."""
    if runs and all(r.done for r in runs):
        return "Succeeded" if all(r.exit_code == 0 for r in runs) else "Failed"
    if any(r.started_at for r in runs):
        return "Running"
    return "Pending"


def build_status(
    pod: dict[str, Any],
    runs: list[ContainerRun],
    *,
    conditions: Conditions,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    initialized: bool,
) -> dict[str, Any]:
    """The status to write for ``pod``."""
    spec = pod.get("spec", {})
    existing = {c["type"]: c for c in pod.get("status", {}).get("conditions", []) or []}
    phase = compute_phase(runs)
    containers_ready = bool(runs) and all(r.ready for r in runs)
    gates = [g["conditionType"] for g in spec.get("readinessGates", []) or []]
    gates_ok = all(existing.get(g, {}).get("status") == "True" for g in gates)
    terminal = phase in ("Succeeded", "Failed")
    not_ready = "PodCompleted" if terminal else "ContainersNotReady"
    conds = [
        conditions.set("PodReadyToStartContainers", not terminal),
        conditions.set("Initialized", initialized, "ContainersNotInitialized"),
        conditions.set("ContainersReady", containers_ready and not terminal, not_ready),
        conditions.set("Ready", containers_ready and gates_ok and not terminal, not_ready),
    ]
    if "PodScheduled" in existing:
        conds.insert(0, existing["PodScheduled"])
    # Readiness gates' conditions belong to whoever sets them: carried over untouched.
    conds += [existing[g] for g in gates if g in existing]
    return {
        "phase": phase,
        "conditions": conds,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "containerStatuses": [r.as_status() for r in runs],
    }
