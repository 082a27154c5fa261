"""The pools of pods and the simulated Deployments the autoscaler actuates. Pure.

``scale_to(role, n)`` does what a Deployment and its ReplicaSet do when the operator
patches ``scale``: new pods are created at once and become ready one cold start later;
on scale-down, pods that are not ready yet go first (newest first, as the ReplicaSet
prefers unready pods), then the least-loaded ready pods (the operator sets
``controller.kubernetes.io/pod-deletion-cost`` from load). A removed ready pod leaves
the router at once and drains; it is gone when its engine is empty or its shutdown
timeout passes. ``replicas`` counts what the Deployment counts: starting and ready
pods, not terminating ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.api.vocab import PoolRole
from tandem.sim.fleet.events import NewEvent
from tandem.sim.fleet.pod import DRAINING, GONE, READY, STARTING, Pod
from tandem.sim.fleet.spec import FleetPlan

#: Event kinds the fleet schedules (the simulation maps them to handlers).
POD_READY = 10
DRAIN_DEADLINE = 11


class Fleet:
    """Every pod of a run, by role, with the replica timeline and GPU-seconds."""

    def __init__(self, plan: FleetPlan) -> None:
        self.plan = plan
        self.pods: dict[PoolRole, list[Pod]] = {role: [] for role in plan.pools}
        """Pods that are not gone, by role."""
        self.by_number: list[Pod] = []
        """Every pod ever created, by its number."""
        self.gone_gpu_s: dict[str, float] = dict.fromkeys(plan.pools, 0.0)
        self.timeline: list[tuple[float, PoolRole, int, int]] = []
        """``(time s, role, replicas, ready)`` after every change."""

    def create(self, role: PoolRole, now_s: float, ready: bool = False) -> Pod:
        pool = self.plan.pools[role]
        pod = Pod(len(self.by_number), role, pool.new_engine(), pool.gpus_per_replica, now_s)
        self.by_number.append(pod)
        self.pods[role].append(pod)
        if ready:
            pod.state = READY
            pod.ready_s = now_s
        return pod

    def replicas(self, role: PoolRole) -> int:
        """Starting plus ready pods (what the Deployment's ``replicas`` says)."""
        return sum(1 for p in self.pods[role] if p.state in (STARTING, READY))

    def ready(self, role: PoolRole) -> list[Pod]:
        return [p for p in self.pods[role] if p.state == READY]

    def scale_to(
        self, role: PoolRole, desired: int, now_s: float
    ) -> tuple[list[NewEvent], list[Pod], list[Pod]]:
        """Actuate ``desired`` replicas: (events, pods created, ready pods to drain).

        Pods that were still starting are removed outright; the caller takes drained
        pods out of the router.
        """
        pods = self.pods[role]
        current = [p for p in pods if p.state in (STARTING, READY)]
        events: list[NewEvent] = []
        created: list[Pod] = []
        drained: list[Pod] = []
        if desired > len(current):
            for _ in range(desired - len(current)):
                pod = self.create(role, now_s)
                created.append(pod)
                events.append((now_s + self.plan.cold_start_s, POD_READY, pod))
        elif desired < len(current):
            excess = len(current) - desired
            starting = sorted(
                (p for p in current if p.state == STARTING), key=lambda p: -p.created_s
            )
            for pod in starting[:excess]:
                self.remove(pod, now_s)
            excess -= min(excess, len(starting))
            ready = sorted(
                (p for p in current if p.state == READY), key=lambda p: (p.load, -p.number)
            )
            for pod in ready[:excess]:
                pod.state = DRAINING
                pod.drain_deadline_s = now_s + self.plan.shutdown_timeout_s
                drained.append(pod)
                events.append((pod.drain_deadline_s, DRAIN_DEADLINE, pod))
        if created or drained or desired != len(current):
            self.record(role, now_s)
        return events, created, drained

    def mark_ready(self, pod: Pod, now_s: float) -> bool:
        """A cold start finished; False when the pod was removed meanwhile."""
        if pod.state != STARTING:
            return False
        pod.state = READY
        pod.ready_s = now_s
        self.record(pod.role, now_s)
        return True

    def remove(self, pod: Pod, now_s: float) -> None:
        """The pod is gone: its GPUs stop being paid."""
        if pod.state == GONE:
            return
        pod.state = GONE
        pod.removed_s = now_s
        self.pods[pod.role].remove(pod)
        self.gone_gpu_s[pod.role] += pod.gpu_seconds(now_s)
        self.record(pod.role, now_s)

    def record(self, role: PoolRole, now_s: float) -> None:
        self.timeline.append((now_s, role, self.replicas(role), len(self.ready(role))))

    def gpu_seconds(self, now_s: float) -> Mapping[str, float]:
        """GPU-seconds per pool so far, pods still alive counted up to ``now_s``."""
        return {
            role: self.gone_gpu_s[role] + sum(p.gpu_seconds(now_s) for p in pods)
            for role, pods in self.pods.items()
        }

    def alive(self) -> list[Pod]:
        return [p for pods in self.pods.values() for p in pods]
