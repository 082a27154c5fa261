"""The local fleet: pools of engine processes, scaled like Deployments. Does I/O.

``scale(role, n)`` adds pods (they become ready after the cold start) or removes the
least-loaded ones (lowest ``pod-deletion-cost``, as the ReplicaSet controller would),
after taking them out of the router so no new request reaches them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping

import aiohttp

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.local.processes import EnginePod, check_ready, spawn_engine, stop_engine
from tandem.manifests.vllm_args import build_sim_args
from tandem.observe.source import PoolTargets, metrics_url


def build_local_engine_args(
    isvc: InferenceService, role: PoolRole, cold_start_s: float
) -> list[str]:
    """The sim engine's arguments for ``role``, as the cluster builders emit them, minus
    the listen address (chosen locally) and plus the modelled cold start."""
    args = build_sim_args(isvc, role)
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port"):
            skip = True
            continue
        out.append(arg)
    return [*out, "--startup-delay", f"{cold_start_s:g}"]


class LocalFleet:
    """Every pool of one InferenceService as local processes."""

    def __init__(
        self,
        isvc: InferenceService,
        cold_start_s: float,
        clock: Callable[[], float],
        on_change: Callable[[PoolRole, list[str]], None],
    ) -> None:
        self.isvc = isvc
        self.cold_start_s = cold_start_s
        self.clock = clock
        self.on_change = on_change
        self.pods: dict[PoolRole, list[EnginePod]] = {role: [] for role in isvc.spec.pools()}
        self._ids = itertools.count()
        self._stopping: set[asyncio.Task[None]] = set()
        self.spawned: list[int] = []
        """Process ids of every pod ever started (for checks that none is left)."""

    def replicas(self, role: PoolRole) -> int:
        return len(self.pods[role])

    def ready(self, role: PoolRole) -> list[EnginePod]:
        return [p for p in self.pods[role] if p.ready]

    def targets(self) -> dict[PoolRole, PoolTargets]:
        """What the scraper reads: each pool's size and its ready pods' metrics URLs."""
        return {
            role: PoolTargets(
                replicas=len(pods),
                ready=len(self.ready(role)),
                pods={p.name: metrics_url("127.0.0.1", p.port) for p in self.ready(role)},
            )
            for role, pods in self.pods.items()
        }

    async def scale(
        self, role: PoolRole, replicas: int, costs: Mapping[str, int] | None = None
    ) -> None:
        pods = self.pods[role]
        while len(pods) < replicas:
            name = f"{self.isvc.name}-{role}-{next(self._ids)}"
            args = build_local_engine_args(self.isvc, role, self.cold_start_s)
            pod = await spawn_engine(name, role, args, self.clock())
            self.spawned.append(pod.process.pid)
            pods.append(pod)
        if len(pods) > replicas:
            order = sorted(pods, key=lambda p: (p.ready, (costs or {}).get(p.name, 0)))
            for pod in order[: len(pods) - replicas]:
                pods.remove(pod)
                task = asyncio.create_task(stop_engine(pod))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
            self._publish(role)

    async def refresh(self, session: aiohttp.ClientSession) -> None:
        """Mark pods ready as their health turns 200; drop pods whose process died."""
        for role, pods in self.pods.items():
            changed = False
            for pod in list(pods):
                if not pod.alive:
                    pods.remove(pod)
                    changed = True
                    continue
                ready = await check_ready(session, pod)
                if ready != pod.ready:
                    pod.ready, changed = ready, True
                    if ready and pod.ready_s is None:
                        pod.ready_s = self.clock()
            if changed:
                self._publish(role)

    def _publish(self, role: PoolRole) -> None:
        self.on_change(role, [p.url for p in self.ready(role)])

    async def close(self) -> None:
        """Stop every pod and wait until all processes are reaped."""
        everything = [p for pods in self.pods.values() for p in pods]
        for pods in self.pods.values():
            pods.clear()
        await asyncio.gather(*(stop_engine(p, grace_s=5.0) for p in everything), *self._stopping)
