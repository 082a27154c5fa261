"""The Event recorder: deduplicated, never blocking, failures dropped after retries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tandem.control.metrics import OperatorMetrics
from tandem.controller.events import EventRecorder
from tandem.kube import KubeClient
from tests.support import Emulator, FaultRule, emulator_url, serve_emulator

OBJ = {
    "apiVersion": "serving.tandem.dev/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "chat", "namespace": "default", "uid": "u1"},
}


@pytest.fixture
async def k() -> AsyncIterator[Emulator]:
    async with serve_emulator() as emulator:
        yield emulator


@pytest.fixture
async def recorder(k: Emulator) -> AsyncIterator[EventRecorder]:
    client = KubeClient.for_url(emulator_url(k))
    events = EventRecorder(client, OperatorMetrics(), instance="pod-1", dedupe_s=60)
    await events.start()
    yield events
    await events.stop()
    await client.close()


async def test_the_same_message_is_posted_once_per_window(
    k: Emulator, recorder: EventRecorder
) -> None:
    for _ in range(3):
        recorder.record(OBJ, "Warning", "ApplyFailed", "same")
    recorder.record(OBJ, "Warning", "ApplyFailed", "other")
    await recorder.drain()
    assert sorted(e["message"] for e in k.list("v1/events")) == ["other", "same"]


async def test_a_failing_api_never_raises_into_the_caller(
    k: Emulator, recorder: EventRecorder
) -> None:
    k.faults.add(FaultRule(status=403, plurals={"events"}))
    recorder.record(OBJ, "Normal", "Created", "x")
    await recorder.drain()
    assert k.list("v1/events") == []
    assert len(k.faults.log) == 1, "a 403 is not retried"


async def test_messages_are_posted_again_after_the_window(k: Emulator) -> None:
    now = [0.0]
    client = KubeClient.for_url(emulator_url(k))
    events = EventRecorder(
        client, OperatorMetrics(), instance="p", dedupe_s=10, clock=lambda: now[0]
    )
    await events.start()
    try:
        events.record(OBJ, "Normal", "Created", "x")
        now[0] = 5
        events.record(OBJ, "Normal", "Created", "x")
        now[0] = 11
        events.record(OBJ, "Normal", "Created", "x")
        await events.drain()
        assert len(k.list("v1/events")) == 2
        assert len(events._recent) == 1
    finally:
        await events.stop()
        await client.close()
