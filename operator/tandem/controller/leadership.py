"""Leader election over a ``coordination.k8s.io/v1`` Lease, so two replicas never both act.

The rules (:func:`decide_lease`, :func:`build_lease_spec`) are pure; :class:`LeaderElector`
does the I/O through :mod:`tandem.kube.lease`. They follow client-go's leader election:

* a candidate takes the Lease when it does not exist, when its holder released it, or
  when its record has not changed for ``leaseDurationSeconds`` *as measured on the
  candidate's own clock* (no comparison of two machines' wall clocks);
* every write is conditional on the resourceVersion read, so of two candidates racing
  for the same Lease exactly one wins;
* the leader renews every ``retry_period_s`` and stops acting once renewing has failed
  for ``renew_deadline_s`` — shorter than ``lease_duration_s``, so it has stopped before
  anyone else may take over;
* on a clean shutdown the leader releases the Lease so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from tandem.controller.config import LeaseConfig
from tandem.kube import KubeClient, KubeError, create_lease, fetch_lease, replace_lease

Action = Literal["create", "acquire", "renew", "wait"]


def decide_lease(
    spec: Mapping[str, Any] | None,
    identity: str,
    *,
    unchanged_for_s: float,
    lease_duration_s: float,
) -> Action:
    """What a candidate does with the Lease record it just read.

    ``unchanged_for_s``: how long (our clock) the record has looked exactly like this.

    >>> decide_lease({"holderIdentity": "a", "leaseDurationSeconds": 15}, "b",
    ...              unchanged_for_s=3, lease_duration_s=15)
    'wait'
    >>> decide_lease({"holderIdentity": "a", "leaseDurationSeconds": 15}, "b",
    ...              unchanged_for_s=16, lease_duration_s=15)
    'acquire'
    """
    if spec is None:
        return "create"
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return "renew"
    if not holder:
        return "acquire"
    duration = float(spec.get("leaseDurationSeconds") or lease_duration_s)
    return "acquire" if unchanged_for_s > duration else "wait"


def micro_time(when: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_lease_spec(
    identity: str,
    action: Action,
    previous: Mapping[str, Any] | None,
    *,
    now: datetime,
    lease_duration_s: float,
) -> dict[str, Any]:
    """The Lease spec after ``action`` (create, acquire or renew) by ``identity``."""
    previous = previous or {}
    stamp = micro_time(now)
    transitions = int(previous.get("leaseTransitions") or 0)
    if action == "renew":
        acquired = previous.get("acquireTime") or stamp
    else:
        acquired = stamp
        transitions += 1 if action == "acquire" else 0
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": math.ceil(lease_duration_s),
        "acquireTime": acquired,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def build_released_spec(previous: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The spec a leader leaves behind on shutdown: no holder, free to take at once."""
    stamp = micro_time(now)
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": int(previous.get("leaseTransitions") or 0),
    }


class LeaderElector:
    """Acquire, hold and release the Lease of one operator identity."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaseConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.config = config
        self._clock = clock
        self._wall = wall
        self._record: Any = None
        self._record_since = clock()
        self.leading = False

    def _observe(self, lease: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        spec = None if lease is None else lease.get("spec") or {}
        if spec != self._record:
            self._record = spec
            self._record_since = self._clock()
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when we hold the Lease afterwards."""
        cfg = self.config
        try:
            lease = await fetch_lease(self.client, cfg.namespace, cfg.name)
            spec = self._observe(lease)
            action = decide_lease(
                spec,
                cfg.identity,
                unchanged_for_s=self._clock() - self._record_since,
                lease_duration_s=cfg.lease_duration_s,
            )
            if action == "wait":
                self.leading = False
                return False
            new = build_lease_spec(
                cfg.identity, action, spec, now=self._wall(), lease_duration_s=cfg.lease_duration_s
            )
            if lease is None:
                stored = await create_lease(self.client, cfg.namespace, cfg.name, new)
            else:
                stored = await replace_lease(self.client, lease, new)
        except KubeError:
            self.leading = False
            return False
        self._observe(stored)
        self.leading = True
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until we lead (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if await self.try_acquire_or_renew():
                return True
            await _wait(stop, self.config.retry_period_s)
        return False

    async def hold(self, stop: asyncio.Event) -> bool:
        """Renew until ``stop`` (True) or until renewing failed for the renew deadline
        (False: leadership lost; stop acting now)."""
        last_renewed = self._clock()
        while not stop.is_set():
            await _wait(stop, self.config.retry_period_s)
            if stop.is_set():
                break
            if await self.try_acquire_or_renew():
                last_renewed = self._clock()
            elif self._clock() - last_renewed > self.config.renew_deadline_s or (
                self._record
                and self._record.get("holderIdentity") not in (None, "", self.config.identity)
            ):
                self.leading = False
                return False
        return True

    async def release(self) -> None:
        """Give the Lease up (best effort) so a standby takes over without waiting."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await fetch_lease(self.client, self.config.namespace, self.config.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != (
                self.config.identity
            ):
                return
            await replace_lease(
                self.client, lease, build_released_spec(lease.get("spec") or {}, now=self._wall())
            )
        except KubeError:
            return


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass
