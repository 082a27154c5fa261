"""List and watch against the emulator, for what the real API server cannot be made to do
on demand: a fresh list after the watched version expired (410), a failing watch
request. Events after the list and a watch renewed after the server ends it are checked
on the real API server (``e2e/test_kube.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tandem.kube import POD, KubeClient, KubeError
from tandem.kube.watch import ListWatch, Query, list_objects, watch_objects
from tests.support import Emulator, emulator_url, eventually, serve_emulator
from tests.support.kube_faults import FaultRule
from tests.support.listwatch import Seen


def pod(name: str, app: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def create(client: KubeClient, obj: dict[str, Any]) -> None:
    await client.request("POST", POD.path("default"), body=obj)


@contextlib.asynccontextmanager
async def following(client: KubeClient, seen: Seen) -> AsyncIterator[ListWatch]:
    watch = ListWatch(client, Query(POD, "default", label_selector="app=web"), seen.on_list,
                      seen.on_event)  # fmt: skip
    await watch.relist()
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_expired_version_lists_again() -> None:
    async with serve_emulator(history_limit=1) as k:
        kube = KubeClient.for_url(emulator_url(k), timeout_s=2.0)
        try:
            await create(kube, pod("a"))
            _, version = await list_objects(kube, Query(POD, "default"))
            for n in range(3):  # the history no longer reaches back to that version
                await create(kube, pod(f"x{n}"))
            with pytest.raises(KubeError) as err:
                async for _ in watch_objects(kube, Query(POD, "default"), version):
                    pass
            assert err.value.status == 410
            seen = Seen()
            watch = ListWatch(kube, Query(POD, "default"), seen.on_list, seen.on_event)
            watch.resource_version = version
            task = asyncio.create_task(watch.run())
            try:
                await eventually(lambda: seen.lists == [["a", "x0", "x1", "x2"]], what="relist")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await kube.close()


async def test_a_failed_watch_request_is_a_kube_error_and_the_loop_carries_on(
    k: Emulator, client: KubeClient
) -> None:
    k.faults.add(FaultRule(status=503, methods={"GET"}, plurals={"pods"}, limit=1))
    with pytest.raises(KubeError) as err:
        async for _ in watch_objects(client, Query(POD, "default"), None):
            pass
    assert err.value.status == 503 and err.value.reason == "ServiceUnavailable"
    k.faults.add(FaultRule(status=500, methods={"GET"}, plurals={"pods"}, limit=2))
    seen = Seen()
    watch = ListWatch(client, Query(POD, "default"), seen.on_list, seen.on_event)
    task = asyncio.create_task(watch.run())  # its first watch and re-list fail
    try:
        await eventually(lambda: k.open_watches("pods") == 1, what="a watch after the faults")
        await create(client, pod("after"))
        await eventually(lambda: ("ADDED", "after") in seen.events, what="the event")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
