"""Convergence under API faults, and one broken service never blocking the others."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.factories import make_manifest
from tests.operator.helpers import (
    DEPLOY,
    children,
    condition,
    create,
    disaggregated_children,
    isvc,
    patch_spec,
    writes_by,
)
from tests.support import Emulator, FaultRule, emulator_url, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle

NAMES = ("alpha", "beta", "gamma")


def _complete(k: Emulator, names: tuple[str, ...] = NAMES) -> bool:
    have = set(children(k))
    return all(
        disaggregated_children(n) <= have
        and (isvc(k, n).get("status") or {}).get("observedGeneration")
        == isvc(k, n)["metadata"]["generation"]
        for n in names
    )


async def _converges_under(k: Emulator, api: Api, operators: object, rule: FaultRule) -> None:
    for name in NAMES:
        await create(api, make_manifest(name))
    k.faults.add(rule)
    op = await operators()  # type: ignore[operator]
    await eventually(lambda: _complete(k), timeout_s=30, what="every service complete")
    assert k.faults.log, "no fault was injected"
    k.faults.clear()
    await settle(op, k)
    assert _complete(k)
    metrics = op.operator.metrics.exposition().decode()
    assert "tandem_operator_api_errors_total{" in metrics


async def test_converges_when_a_third_of_the_writes_fail_with_500(
    k: Emulator, api: Api, operators: object
) -> None:
    await _converges_under(k, api, operators, FaultRule(status=500, share=0.3))


async def test_converges_when_a_third_of_the_writes_conflict(
    k: Emulator, api: Api, operators: object
) -> None:
    await _converges_under(k, api, operators, FaultRule(status=409, share=0.3))


async def test_converges_when_replies_are_lost_after_the_write(
    k: Emulator, api: Api, operators: object
) -> None:
    for name in NAMES:
        await create(api, make_manifest(name))
    k.faults.add(FaultRule(delay_s=0.6, lost_reply=True, share=0.3, limit=8))
    op = await operators(client_timeout_s=0.3)  # type: ignore[operator]
    await eventually(lambda: _complete(k), timeout_s=30, what="every service complete")
    await settle(op, k)
    assert len(k.faults.log) == 8
    assert set(children(k)) == set().union(*(disaggregated_children(n) for n in NAMES))


async def test_converges_after_watch_streams_are_cut(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await create(api, make_manifest("alpha"))
    await eventually(lambda: _complete(k, ("alpha",)))
    for abort in (True, False, True):
        await eventually(lambda: k.open_watches("deployments"), what="the watches back")
        assert k.cut_watches(abort=abort) > 0
    k.delete_object(DEPLOY, "default", "alpha-decode")
    await patch_spec(api, "alpha", {"decode": {"memory": "48Gi"}})
    k.cut_watches(abort=True)
    await eventually(
        lambda: (
            (d := k.fetch(DEPLOY, "default", "alpha-decode")) is not None
            and d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            == "48Gi"
        ),
        timeout_s=20,
        what="the decode Deployment back, with the new memory",
    )
    await eventually(lambda: _complete(k, ("alpha",)))


async def test_an_invalid_service_reports_invalid_spec_and_its_neighbour_reconciles(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    bad = make_manifest("bad")
    bad["spec"]["prefill"]["replicas"] = {"min": 4, "max": 2}
    await create(api, bad)
    await create(api, make_manifest("good"))
    ready = await eventually(lambda: condition(isvc(k, "bad"), "Ready"), what="bad's Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.prefill.replicas: " in ready["message"] and "min (4)" in ready["message"]
    assert isvc(k, "bad")["status"]["observedGeneration"] == 1
    await eventually(lambda: _complete(k, ("good",)), what="the valid neighbour")
    assert children(k, service="bad") == {}
    await settle(op, k)
    warnings = [e for e in k.list("v1/events") if e["reason"] == "InvalidSpec"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    mark = k.mark()
    await asyncio.sleep(1.0)
    await settle(op, k)
    assert writes_by(k, op, mark) == [], "an invalid spec must not be retried in a loop"
    fixed = {"prefill": {"replicas": {"min": 1, "max": 2}}}
    await patch_spec(api, "bad", fixed)
    await eventually(lambda: _complete(k, ("bad",)), what="the fixed service")
    assert condition(isvc(k, "bad"), "Ready")["reason"] != "InvalidSpec"  # type: ignore[index]


async def test_a_name_taken_by_a_foreign_object_is_reported_not_overwritten(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    status, _ = await api.create(
        "/api/v1/namespaces/default/services", {"metadata": {"name": "chat"}, "spec": {"ports": []}}
    )
    assert status == 201
    await create(api, make_manifest("chat"))
    ready = await eventually(
        lambda: (c := condition(isvc(k, "chat"), "Ready")) and c["reason"] == "ReconcileError" and c
    )
    assert "Service" in ready["message"] or "services/chat" in ready["message"]
    foreign = k.fetch("v1/services", "default", "chat")
    assert foreign is not None and "ownerReferences" not in foreign["metadata"]
    assert ("Deployment", "chat-prefill") in children(k)
    conflicts = await eventually(
        lambda: [e for e in k.list("v1/events") if e["reason"] == "ChildConflict"]
    )
    assert "not managed by Tandem" in conflicts[0]["message"]


async def test_without_prometheus_operator_crds_only_monitors_fail() -> None:
    from tests.support import serve_emulator
    from tests.support.operator_harness import start_operator, wait_ready

    async with serve_emulator(monitoring=False) as bare:
        op = start_operator(emulator_url(bare))
        try:
            await wait_ready(op, bare)
            async with aiohttp.ClientSession() as session:
                client = Api(session, emulator_url(bare))
                await create(client, make_manifest("plain"))
                await create(client, make_manifest("watched", monitoring={"serviceMonitor": True}))
                await eventually(lambda: _complete(bare, ("plain",)), what="plain reconciled")
                ready = await eventually(
                    lambda: (
                        (c := condition(isvc(bare, "watched"), "Ready"))
                        and c["reason"] == "ReconcileError"
                        and c
                    )
                )
                assert "servicemonitors" in ready["message"]
                assert disaggregated_children("watched") <= set(children(bare))
        finally:
            await op.stop()


async def test_a_foreign_router_service_account_blocks_the_router_until_it_is_gone(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    """The router never runs as an account Tandem does not own (whose token another
    tenant's RBAC may have granted much more)."""
    sa_path = "/api/v1/namespaces/default/serviceaccounts"
    status, _ = await api.create(sa_path, {"metadata": {"name": "chat-router"}})
    assert status == 201
    await create(api, make_manifest("chat"))
    ready = await eventually(
        lambda: (c := condition(isvc(k, "chat"), "Ready")) and c["reason"] == "ReconcileError" and c
    )
    assert "ServiceAccount chat-router" in ready["message"], ready
    await eventually(lambda: ("Deployment", "chat-decode") in children(k))
    await settle(op, k)
    assert ("Deployment", "chat-router") not in children(k)
    blocked = [e for e in k.list("v1/events") if e["reason"] == "RouterBlocked"]
    assert blocked and "not Tandem's" in blocked[0]["message"], blocked
    k.delete_object("v1/serviceaccounts", "default", "chat-router")
    await eventually(
        lambda: ("Deployment", "chat-router") in children(k),
        timeout_s=20,
        what="the router once the foreign account is gone",
    )
