"""High availability: two operators, one Lease, one of them acts; a restart loses nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.factories import make_manifest
from tests.operator.helpers import children, create, disaggregated_children, isvc, writes_by
from tests.support import Emulator, FaultRule, eventually, stays
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle

LEASES = "coordination.k8s.io/v1/leases"


async def test_two_operators_only_the_lease_holder_acts(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    first: RunningOperator = await operators("a", leader_election=True)
    second: RunningOperator = await operators("b", leader_election=True, wait=False)
    await eventually(lambda: second.operator is not None and second.operator.role == "standby")
    leader, standby = (first, second) if first.leading() else (second, first)
    assert leader.leading() and not standby.leading()
    lease = k.fetch(LEASES, "default", "tandem-operator")
    assert lease is not None and lease["spec"]["holderIdentity"] == leader.identity
    await create(api, make_manifest("chat"))
    await eventually(lambda: disaggregated_children("chat") <= set(children(k)))
    await settle(leader, k)
    await stays(lambda: not standby.leading(), for_s=1.0, what="the standby standing by")
    assert writes_by(k, standby) == []
    assert len([w for w in writes_by(k, leader) if "/leases/" not in w]) >= 14


async def test_the_standby_takes_over_when_the_leader_stops(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    first: RunningOperator = await operators("a", leader_election=True)
    second: RunningOperator = await operators("b", leader_election=True, wait=False)
    await eventually(lambda: second.operator is not None and second.operator.role == "standby")
    assert await first.stop() == 0
    await eventually(lambda: second.ready(), timeout_s=10, what="the standby to lead")
    lease = k.fetch(LEASES, "default", "tandem-operator")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] >= 1
    mark = k.mark()
    await create(api, make_manifest("chat"))
    await eventually(lambda: disaggregated_children("chat") <= set(children(k)))
    assert writes_by(k, first, mark) == []


async def test_a_leader_that_finds_the_lease_taken_stops_acting(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op: RunningOperator = await operators("a", leader_election=True)
    # Someone else holds the Lease now (as after a network partition healed).
    k.patch_object(LEASES, "default", "tandem-operator", {"spec": {"holderIdentity": "z"}})
    await eventually(lambda: not op.thread.is_alive(), timeout_s=10, what="the operator to exit")
    assert await op.stop() == 1
    mark = k.mark()
    await create(api, make_manifest("chat"))
    await stays(lambda: not children(k), for_s=0.5, what="nobody acting")
    assert writes_by(k, op, mark) == []


async def test_a_restarted_operator_writes_nothing_for_a_settled_service(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    first: RunningOperator = await operators("a")
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14 and isvc(k, "chat").get("status"))
    await settle(first, k)
    await first.stop()
    second: RunningOperator = await operators("b")
    await eventually(lambda: second.runtime is not None and list(second.runtime.services))
    await settle(second, k)
    assert writes_by(k, second) == []


async def test_a_leader_that_cannot_renew_stops_acting_within_the_renew_deadline(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op: RunningOperator = await operators("a", leader_election=True)
    assert op.operator is not None
    lease = op.operator.config.lease
    # The last renewal happened at most one retry period before the faults began.
    deadline_s = lease.renew_deadline_s - lease.retry_period_s
    k.faults.add(FaultRule(status=503, methods={"GET", "PUT"}, plurals={"leases"}))
    started = time.monotonic()
    await eventually(lambda: not op.thread.is_alive(), timeout_s=10, what="the operator to exit")
    assert await op.stop() == 1
    lost_at = op.operator.lost_lease_at
    assert lost_at is not None
    assert deadline_s <= lost_at - started < lease.lease_duration_s
    assert len(k.faults.log) >= 2
