"""The operator's metrics, liveness endpoint, and per-service tickers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import aiohttp

from tandem.control import Runtime, TickContext
from tests.factories import make_manifest
from tests.operator.helpers import ISVCS, children, create, isvc
from tests.support import Emulator, FaultRule, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as rsp:
        return rsp.status, await rsp.text()


async def _get_when_up(url: str, attempts: int = 50) -> tuple[int, str]:
    """GET ``url``, retrying while nothing listens there yet."""
    for _ in range(attempts - 1):
        try:
            return await _get(url)
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.1)
    return await _get(url)


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


async def test_metrics_count_reconciles_writes_and_services(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14 and isvc(k, "chat").get("status"))
    await settle(op, k)
    assert op.operator is not None and op.operator.metrics_port
    status, text = await _get(f"http://127.0.0.1:{op.operator.metrics_port}/metrics")
    assert status == 200
    assert _sample(text, "tandem_operator_reconciles_total", result="success") >= 1
    assert _sample(text, "tandem_operator_reconcile_duration_seconds_count") >= 1
    assert _sample(text, "tandem_operator_managed_services") == 1
    assert (
        _sample(text, "tandem_operator_child_writes_total", kind="Deployment", verb="create") == 3
    )
    assert _sample(text, "tandem_operator_status_writes_total") == 1
    assert _sample(text, "tandem_operator_events_total", type="Normal", reason="Created") == 14
    assert ":" not in "".join(
        line.split(" ")[0] for line in text.splitlines() if line.startswith("tandem_")
    )


async def test_metrics_count_api_errors(k: Emulator, api: Api, op: RunningOperator) -> None:
    k.faults.add(FaultRule(status=503, plurals={"deployments"}, limit=2))
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14)
    assert op.operator is not None
    text = op.operator.metrics.exposition().decode()
    assert (
        _sample(
            text,
            "tandem_operator_api_errors_total",
            verb="create",
            resource="deployments",
            code="503",
        )
        == 2
    )
    assert _sample(text, "tandem_operator_reconciles_total", result="error") >= 1


async def test_liveness_answers_on_the_leader_and_on_the_standby(
    k: Emulator, operators: Callable[..., Any]
) -> None:
    leader_url = f"http://127.0.0.1:{_free_port()}/healthz"
    standby_url = f"http://127.0.0.1:{_free_port()}/healthz"
    await operators("a", leader_election=True, liveness=leader_url)
    second: RunningOperator = await operators(
        "b", leader_election=True, liveness=standby_url, wait=False
    )
    await eventually(lambda: second.operator is not None and second.operator.role == "standby")
    status, text = await _get_when_up(leader_url)
    assert status == 200 and "reconciler" in text
    status, text = await _get(standby_url)
    assert status == 200 and "standby" in text
    assert second.operator.metrics_port
    status, text = await _get(f"http://127.0.0.1:{second.operator.metrics_port}/healthz")
    assert status == 200 and '"role": "standby"' in text


async def test_tickers_run_per_service_and_stop_when_it_is_deleted(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    ticks: list[tuple[str, int]] = []
    forgotten: list[tuple[str, str]] = []
    closed: list[bool] = []

    async def tick(ctx: TickContext) -> None:
        ticks.append((ctx.key[1], len(ctx.children)))

    async def close() -> None:
        closed.append(True)

    def setup(runtime: Runtime) -> None:
        runtime.tickers.add("probe", lambda body: 0.1, tick, forget=forgotten.append, close=close)

    op: RunningOperator = await operators(setup=setup)
    await create(api, make_manifest("alpha"))
    await create(api, make_manifest("beta"))
    await eventually(lambda: {"alpha", "beta"} <= {name for name, _ in ticks})
    await eventually(lambda: ("alpha", 14) in ticks, what="a tick seeing every child")
    status, _ = await api.delete(f"{ISVCS.format(ns='default')}/alpha")
    assert status == 200
    await eventually(
        lambda: op.runtime is not None and op.runtime.tickers.running(("default", "alpha")) == []
    )
    assert forgotten == [("default", "alpha")]
    before = len([t for t in ticks if t[0] == "alpha"])
    await eventually(lambda: len([t for t in ticks if t[0] == "beta"]) > len(ticks) // 2 + 2)
    assert len([t for t in ticks if t[0] == "alpha"]) == before
    assert closed == []
    await op.stop()
    assert closed == [True]  # the runtime stopped: the ticker closed once
