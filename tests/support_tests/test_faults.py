"""Injected faults: failed writes are answered before any state changes."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.support import Emulator, FaultRule
from tests.support.api_client import Api
from tests.support_tests.conftest import DEPLOYMENTS, deployment


async def test_a_failed_write_is_not_applied(api: Api, k: Emulator) -> None:
    k.faults.fail_writes(1.0, status=500)
    status, body = await api.create(DEPLOYMENTS, deployment())
    assert (status, body["reason"]) == (500, "InternalError")
    k.faults.clear()
    assert (await api.get(f"{DEPLOYMENTS}/web"))[0] == 404


async def test_conflicts_on_a_share_of_writes(api: Api, k: Emulator) -> None:
    await api.create(DEPLOYMENTS, deployment())
    k.faults.fail_writes(0.5, status=409)
    answers = [
        (await api.patch(f"{DEPLOYMENTS}/web", {"spec": {"replicas": i}}))[0] for i in range(2, 42)
    ]
    assert 8 <= answers.count(409) <= 32
    assert set(answers) == {200, 409}
    assert len(k.faults.log) == answers.count(409)


async def test_reads_are_not_failed_by_write_faults(api: Api, k: Emulator) -> None:
    await api.create(DEPLOYMENTS, deployment())
    k.faults.fail_writes(1.0, status=503)
    assert (await api.get(f"{DEPLOYMENTS}/web"))[0] == 200


async def test_rules_can_target_one_resource_and_stop_after_a_limit(api: Api, k: Emulator) -> None:
    k.faults.add(FaultRule(status=503, plurals={"services"}, limit=1))
    assert (await api.create(DEPLOYMENTS, deployment()))[0] == 201
    services = "/api/v1/namespaces/default/services"
    assert (await api.create(services, {"metadata": {"name": "s"}}))[0] == 503
    assert (await api.create(services, {"metadata": {"name": "s"}}))[0] == 201


async def test_slow_answers_time_clients_out(api: Api, k: Emulator) -> None:
    k.faults.add(FaultRule(status=504, delay_s=0.5, methods={"GET"}))
    started = time.monotonic()
    try:
        async with api.session.get(
            api.base + f"{DEPLOYMENTS}/web", timeout=aiohttp.ClientTimeout(total=0.2)
        ):
            pass
    except TimeoutError:
        pass
    else:
        raise AssertionError("expected a client timeout")
    assert time.monotonic() - started < 0.5
    await asyncio.sleep(0.4)


async def test_faults_replay_with_the_same_seed() -> None:
    from tests.support import FaultInjector

    def draws(seed: int) -> list[bool]:
        injector = FaultInjector(seed)
        injector.fail_writes(0.5)
        return [injector.pick("POST", "/", "pods", None) is not None for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


async def test_a_lost_reply_applies_the_write_but_answers_late(api: Api, k: Emulator) -> None:
    k.faults.add(FaultRule(delay_s=0.5, lost_reply=True, limit=1))
    try:
        async with api.session.post(
            api.base + DEPLOYMENTS, json=deployment(), timeout=aiohttp.ClientTimeout(total=0.1)
        ):
            pass
    except TimeoutError:
        pass
    else:
        raise AssertionError("expected a client timeout")
    await asyncio.sleep(0.5)
    assert (await api.get(f"{DEPLOYMENTS}/web"))[0] == 200
