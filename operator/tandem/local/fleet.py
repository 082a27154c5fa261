"""The local fleet: pools of engine processes, scaled like Deployments. Does I/O.

``scale(role, n)`` adds pods (ready after their cold start) or removes the least-loaded
ones (lowest ``pod-deletion-cost``, as the ReplicaSet controller would): each leaves the
router first, then drains and stops as a terminating pod does
(:func:`~tandem.local.processes.stop_engine`), in the background, so the autoscaler's
loop never waits on a drain. A pod's life, from its start to its process being reaped,
is recorded for the GPU-seconds of the summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.local.engines import EngineLaunch
from tandem.local.processes import EnginePod, check_health, free_port, spawn_engine, stop_engine
from tandem.local.summary import PodLife
from tandem.observe.source import PoolTargets, metrics_url

#: The engines' readiness probe, locally: a check's timeout, and how many fail in a row
#: before a pod leaves the router (the pods' probe: 5 s, 3 failures, every 5 s).
READINESS_TIMEOUT_S = 2.0
READINESS_FAILURES = 3


class LocalFleet:
    """Every pool of one InferenceService as local processes."""

    def __init__(
        self,
        isvc: InferenceService,
        launch: EngineLaunch,
        clock: Callable[[], float],
        on_change: Callable[[PoolRole, list[str]], None],
        log_dir: Path | None = None,
    ) -> None:
        self.isvc = isvc
        self.launch = launch
        self.clock = clock
        self.on_change = on_change
        self.log_dir = log_dir
        self.pods: dict[PoolRole, list[EnginePod]] = {role: [] for role in isvc.spec.pools()}
        self._ids = itertools.count()
        self._retiring: dict[EnginePod, asyncio.Task[None]] = {}
        self._ended: list[PodLife] = []
        self.spawned: list[int] = []
        """Process ids of every pod ever started (for checks that none is left)."""
        self.failures: list[str] = []
        """Pods that exited before they were ever ready, each with its log's last lines."""

    def replicas(self, role: PoolRole) -> int:
        return len(self.pods[role])

    def ready(self, role: PoolRole) -> list[EnginePod]:
        return [p for p in self.pods[role] if p.ready]

    def draining(self) -> int:
        """Pods out of the router that are still draining or stopping."""
        return len(self._retiring)

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

    def lives(self) -> list[PodLife]:
        """Every pod's life so far: ended ones, and those still running up to now."""
        now = self.clock()
        running = [p for pods in self.pods.values() for p in pods] + list(self._retiring)
        return self._ended + [PodLife(p.role, p.started_s, now) for p in running]

    async def scale(
        self, role: PoolRole, replicas: int, costs: Mapping[str, int] | None = None
    ) -> None:
        pods = self.pods[role]
        while len(pods) < replicas:
            pods.append(await self._spawn(role))
        if len(pods) > replicas:
            order = sorted(pods, key=lambda p: (p.ready, (costs or {}).get(p.name, 0)))
            leaving = order[: len(pods) - replicas]
            for pod in leaving:
                pods.remove(pod)
            self._publish(role)  # out of the router before anything else happens to it
            for pod in leaving:
                self._retiring[pod] = asyncio.create_task(self._retire(pod))

    async def _spawn(self, role: PoolRole) -> EnginePod:
        name = f"{self.isvc.name}-{role}-{next(self._ids)}"
        port, side_channel_port = free_port(), free_port()
        command = self.launch.command(self.isvc, role, port, side_channel_port, os.environ)
        log_path = None if self.log_dir is None else self.log_dir / f"{name}.log"
        pod = await spawn_engine(
            name, role, command.argv, command.env, port, self.clock(), log_path, command.env_drop
        )
        self.spawned.append(pod.process.pid)
        return pod

    async def _retire(self, pod: EnginePod) -> None:
        try:
            await stop_engine(pod, self.isvc.spec.engine.shutdown_timeout)
            self._end(pod)
        finally:
            self._retiring.pop(pod, None)

    def _end(self, pod: EnginePod) -> None:
        if pod.ended_s is None:
            pod.ended_s = self.clock()
            self._ended.append(PodLife(pod.role, pod.started_s, pod.ended_s))

    async def refresh(self, session: aiohttp.ClientSession) -> None:
        """Check every pod's health at once: ready on the first good check, not ready
        after :data:`READINESS_FAILURES` bad ones in a row; drop pods whose process died
        (the next tick replaces them, as a Deployment would)."""
        pods = [p for role_pods in self.pods.values() for p in role_pods]
        healthy = await asyncio.gather(
            *(check_health(session, p, READINESS_TIMEOUT_S) for p in pods)
        )
        changed: set[PoolRole] = set()
        for pod, ok in zip(pods, healthy, strict=True):
            role = pod.role
            if not pod.alive:
                self.pods[role].remove(pod)
                changed.add(role)
                if pod.ready_s is None:
                    self.failures.append(
                        f"{pod.name} exited with {pod.process.returncode} before it was "
                        f"ready; last lines of its log:\n{pod.log_tail()}"
                    )
                await stop_engine(pod, 0.0, drain=False)  # reap it and its children
                self._end(pod)
                continue
            pod.failed_checks = 0 if ok else pod.failed_checks + 1
            ready = ok or (pod.ready and pod.failed_checks < READINESS_FAILURES)
            if ready != pod.ready:
                pod.ready = ready
                changed.add(role)
                if ready and pod.ready_s is None:
                    pod.ready_s = self.clock()
        for role in changed:
            self._publish(role)

    def _publish(self, role: PoolRole) -> None:
        self.on_change(role, [p.url for p in self.ready(role)])

    async def close(self) -> None:
        """Stop every pod, draining ones included, and wait until all are reaped. Nothing
        routes to them any more, so no drain: SIGTERM, then SIGKILL after 5 s."""
        for task in list(self._retiring.values()):
            task.cancel()
        everything = [p for pods in self.pods.values() for p in pods] + list(self._retiring)
        for pods in self.pods.values():
            pods.clear()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._retiring.values(), return_exceptions=True)
        await asyncio.gather(*(stop_engine(p, 0.0, drain=False) for p in everything))
        for pod in everything:
            self._end(pod)
