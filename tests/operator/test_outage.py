"""An API outage: the Events of the time it lasted are posted once it answers again,
with one that says how long it was away; an operator that dies of it loses none."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.factories import make_manifest
from tests.operator.helpers import DEPLOY, children, create
from tests.support import Emulator, FaultRule, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import settle

EVERYTHING = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


def _events(k: Emulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in k.list("v1/events") if e["reason"] == reason]


async def _outage_with_a_deleted_child(k: Emulator, seconds: float) -> None:
    """The API answers nothing but 503 for ``seconds``; meanwhile a child disappears,
    so the operator has something to do and to say (and cannot)."""
    rule = k.faults.add(FaultRule(status=503, methods=EVERYTHING))
    k.delete_object(DEPLOY, "default", "chat-decode")
    await asyncio.sleep(seconds)
    assert rule.injected > 0
    k.faults.clear()


async def test_events_of_an_outage_are_posted_once_the_api_answers_with_its_duration(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await operators(outage_report_s=1.0)
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14, what="the children")
    await settle(op, k)
    await _outage_with_a_deleted_child(k, 3.0)
    away = await eventually(
        lambda: _events(k, "APIUnavailable"), timeout_s=30, what="the outage reported"
    )
    assert away[0]["involvedObject"]["name"] == "chat" and away[0]["type"] == "Warning"
    assert "the API server did not answer from" in away[0]["message"]
    failed = await eventually(
        lambda: [e for e in _events(k, "ApplyFailed") if "chat-decode" in e["message"]],
        timeout_s=30,
        what="the Event of the failed write, posted late",
    )
    assert "503" in failed[0]["message"]
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"), what="the child back")
    metrics = op.operator.metrics.exposition().decode()
    assert "tandem_operator_api_outages_total 1.0" in metrics


async def test_an_operator_that_dies_of_an_outage_leaves_its_events_to_the_next(
    k: Emulator, api: Api, operators: Callable[..., Any], tmp_path: Path
) -> None:
    spool = tmp_path / "events.json"
    first = await operators("first", leader_election=True, event_spool=str(spool))
    await create(api, make_manifest("chat"))
    await eventually(lambda: len(children(k)) == 14, what="the children")
    await settle(first, k)
    rule = k.faults.add(FaultRule(status=503, methods=EVERYTHING))
    k.delete_object(DEPLOY, "default", "chat-decode")
    code = await eventually(
        lambda: not first.thread.is_alive(), timeout_s=30, what="the leader to give up"
    )
    assert code and first.exit_code == 1, "a lost lease ends the process with 1"
    assert rule.injected > 0
    record = json.loads(spool.read_text())
    assert record["outageStart"]
    assert any(e["reason"] == "ApplyFailed" for e in record["events"]), record
    k.faults.clear()
    second = await operators("second", leader_election=True, event_spool=str(spool))
    away = await eventually(
        lambda: _events(k, "APIUnavailable"), timeout_s=30, what="the outage reported"
    )
    assert away[0]["reportingInstance"] == "second"
    failed = await eventually(
        lambda: [e for e in _events(k, "ApplyFailed") if e["reportingInstance"] == "first"],
        timeout_s=30,
        what="the dead leader's Event",
    )
    assert "posted" in failed[0]["message"] and "late" in failed[0]["message"]
    assert not spool.exists()
    await settle(second, k)
