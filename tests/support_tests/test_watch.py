"""Watches. Reference: https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes
(a watch from a resourceVersion sends every change after it; without one, the current
state as ADDED first; 410 Gone once that version is compacted; ``timeoutSeconds``) and
the watch cache's selector semantics (an object that stops matching is DELETED for that
watch, one that starts matching is ADDED).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from tests.support import Emulator, emulator_url
from tests.support.api_client import Api
from tests.support.waiting import eventually
from tests.support_tests.conftest import DEPLOYMENTS, deployment


async def test_watch_without_resource_version_starts_with_current_state(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment("a"))
    await api.create(DEPLOYMENTS, deployment("b"))
    events = await api.watch(f"{DEPLOYMENTS}?watch=true", events=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


async def test_watch_from_a_resource_version_replays_only_later_changes(api: Api) -> None:
    _, first = await api.create(DEPLOYMENTS, deployment("a"))
    await api.create(DEPLOYMENTS, deployment("b"))
    await api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 3}})
    await api.delete(f"{DEPLOYMENTS}/b")
    since = first["metadata"]["resourceVersion"]
    events = await api.watch(f"{DEPLOYMENTS}?watch=true&resourceVersion={since}", events=3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(since)


async def test_watch_streams_live_changes(api: Api) -> None:
    _, first = await api.create(DEPLOYMENTS, deployment("a"))
    path = f"{DEPLOYMENTS}?watch=true&resourceVersion={first['metadata']['resourceVersion']}"
    reader = asyncio.create_task(api.watch(path, events=1))
    await asyncio.sleep(0.1)
    await api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 2}})
    events = await reader
    assert events[0]["type"] == "MODIFIED"
    assert events[0]["object"]["spec"]["replicas"] == 2


async def test_watch_of_a_compacted_resource_version_is_410_expired() -> None:
    from tests.support import serve_emulator

    async with serve_emulator(history_limit=2) as k, aiohttp.ClientSession() as session:
        api = Api(session, emulator_url(k))
        for name in "abcd":
            await api.create(DEPLOYMENTS, deployment(name))
        events = await api.watch(f"{DEPLOYMENTS}?watch=true&resourceVersion=1", events=1)
        assert events[0]["type"] == "ERROR"
        assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


async def test_watch_with_label_selector_turns_label_changes_into_added_and_deleted(
    api: Api,
) -> None:
    _, first = await api.create(DEPLOYMENTS, deployment("a"))
    since = first["metadata"]["resourceVersion"]
    await api.patch(f"{DEPLOYMENTS}/a", {"metadata": {"labels": {"managed": "yes"}}})
    await api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 2}})
    await api.patch(f"{DEPLOYMENTS}/a", {"metadata": {"labels": {"managed": None}}})
    await api.create(DEPLOYMENTS, deployment("b"))
    events = await api.watch(
        f"{DEPLOYMENTS}?watch=true&labelSelector=managed%3Dyes&resourceVersion={since}", events=3
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(e["object"]["metadata"]["name"] == "a" for e in events)


async def test_watch_ends_after_timeout_seconds(api: Api) -> None:
    started = time.monotonic()
    events = await api.watch(f"{DEPLOYMENTS}?watch=true&timeoutSeconds=1", events=1)
    assert events == []
    assert 0.9 <= time.monotonic() - started < 3


async def test_watch_send_initial_events_ends_with_a_bookmark(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment("a"))
    events = await api.watch(
        f"{DEPLOYMENTS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        events=2,
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_in_one_namespace_sees_only_that_namespace(api: Api) -> None:
    await api.create("/apis/apps/v1/namespaces/other/deployments", deployment("x"))
    await api.create(DEPLOYMENTS, deployment("a"))
    events = await api.watch(f"{DEPLOYMENTS}?watch=true", events=1)
    assert events[0]["object"]["metadata"]["name"] == "a"


async def test_no_op_writes_emit_no_watch_event(api: Api) -> None:
    _, first = await api.create(DEPLOYMENTS, deployment("a"))
    since = first["metadata"]["resourceVersion"]
    await api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 1}})
    await api.patch(f"{DEPLOYMENTS}/a", {"spec": {"replicas": 2}})
    events = await api.watch(f"{DEPLOYMENTS}?watch=true&resourceVersion={since}", events=1)
    assert events[0]["object"]["spec"]["replicas"] == 2


async def test_cut_watches_ends_open_streams(api: Api, k: Emulator) -> None:
    reader = asyncio.create_task(api.watch(f"{DEPLOYMENTS}?watch=true", events=5))
    await eventually(lambda: k.open_watches("deployments"), what="the watch to open")
    assert k.cut_watches("deployments") == 1
    assert await reader == []


async def test_aborted_watches_break_the_connection(api: Api, k: Emulator) -> None:
    reader = asyncio.create_task(api.watch(f"{DEPLOYMENTS}?watch=true", events=5))
    await eventually(lambda: k.open_watches("deployments"), what="the watch to open")
    k.cut_watches(abort=True)
    try:
        await reader
    except aiohttp.ClientPayloadError:
        pass
    else:
        raise AssertionError("an aborted stream must not end cleanly")
