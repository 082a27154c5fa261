"""Leader election rules (pure) and the elector against the emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tandem.controller.leadership import (
    LeaderElector,
    LeaseConfig,
    build_lease_spec,
    build_released_spec,
    decide_lease,
)
from tandem.kube import KubeClient
from tests.support import Emulator, emulator_url, serve_emulator

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_decide_lease() -> None:
    held = {"holderIdentity": "a", "leaseDurationSeconds": 10}
    assert decide_lease(None, "b", unchanged_for_s=0, lease_duration_s=10) == "create"
    assert decide_lease(held, "a", unchanged_for_s=99, lease_duration_s=10) == "renew"
    assert decide_lease(held, "b", unchanged_for_s=5, lease_duration_s=10) == "wait"
    assert decide_lease(held, "b", unchanged_for_s=11, lease_duration_s=10) == "acquire"
    assert (
        decide_lease({"holderIdentity": None}, "b", unchanged_for_s=0, lease_duration_s=10)
        == "acquire"
    )


def test_lease_specs() -> None:
    first = build_lease_spec("a", "create", None, now=NOW, lease_duration_s=15)
    assert first == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T00:00:00.000000Z",
        "renewTime": "2026-01-01T00:00:00.000000Z",
        "leaseTransitions": 0,
    }
    renewed = build_lease_spec("a", "renew", first, now=NOW.replace(second=5), lease_duration_s=15)
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["leaseTransitions"] == 0
    taken = build_lease_spec("b", "acquire", renewed, now=NOW, lease_duration_s=15)
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
    released = build_released_spec(taken, now=NOW)
    assert released["holderIdentity"] is None and released["leaseTransitions"] == 1


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError):
        LeaseConfig("a", lease_duration_s=5, renew_deadline_s=6, retry_period_s=1)


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


async def test_one_of_two_candidates_wins_and_the_other_takes_over_after_expiry(
    k: Emulator,
) -> None:
    clock = [0.0]
    clients = [KubeClient.for_url(emulator_url(k)) for _ in range(2)]
    a, b = (
        LeaderElector(
            c,
            LeaseConfig(name_, lease_duration_s=10, renew_deadline_s=5, retry_period_s=1),
            clock=lambda: clock[0],
        )
        for c, name_ in zip(clients, "ab", strict=True)
    )
    try:
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        clock[0] = 5
        assert not await b.try_acquire_or_renew(), "a's record has not expired yet"
        clock[0] = 10.5
        assert await b.try_acquire_or_renew(), "unchanged for longer than the duration"
        assert not await a.try_acquire_or_renew()
        assert (
            k.fetch("coordination.k8s.io/v1/leases", "default", "tandem-operator")[  # type: ignore[index]
                "spec"
            ]["holderIdentity"]
            == "b"
        )
    finally:
        for c in clients:
            await c.close()


async def test_a_released_lease_is_taken_at_once(k: Emulator) -> None:
    clients = [KubeClient.for_url(emulator_url(k)) for _ in range(2)]
    a, b = (
        LeaderElector(
            c, LeaseConfig(n, lease_duration_s=60, renew_deadline_s=30, retry_period_s=0.05)
        )
        for c, n in zip(clients, "ab", strict=True)
    )
    try:
        assert await a.try_acquire_or_renew()
        await a.release()
        stop = asyncio.Event()
        assert await asyncio.wait_for(b.acquire(stop), 2)
    finally:
        for c in clients:
            await c.close()
