"""Hostile InferenceServices against ``tandem operator`` as a process: one resource the
operator cannot use is reported on that resource and skipped; the process stays up and
its neighbours are served."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.factories import make_manifest
from tests.operator.helpers import children, condition, create, isvc
from tests.support import Emulator, emulator_url, eventually, kubeconfig_for
from tests.support.api_client import Api


@pytest.fixture
def deep_recursion() -> Iterator[None]:
    """Let this test process (the emulator) hold a value nested 1,500 levels deep, as the
    API server does (it allows 10,000); the operator process keeps Python's default."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    yield
    sys.setrecursionlimit(before)


def _nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"next": value}
    return value


async def test_a_service_nested_1500_levels_deep_is_reported_and_its_neighbour_served(
    k: Emulator, api: Api, deep_recursion: None
) -> None:
    deep = make_manifest("deep")
    deep["spec"]["engine"]["kvTransfer"] = {"extraConfig": {"x": _nested(1500)}}
    await create(api, deep)
    with kubeconfig_for(emulator_url(k)) as kubeconfig:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tandem.cli",
            "operator",
            "--kubeconfig",
            kubeconfig,
            "--all-namespaces",
            "--metrics-port=0",
            "--liveness=none",
            "--no-leader-election",
            "--no-autoscaler",
            "--watch-timeout=5",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            ready = await eventually(
                lambda: condition(isvc(k, "deep"), "Ready") or proc.returncode is not None,
                timeout_s=30,
                what="the deep service's Ready condition, or the operator's exit",
            )
            assert proc.returncode is None, "the operator exited"
            assert isinstance(ready, dict)
            assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
            assert "spec.engine.kvTransfer.extraConfig" in ready["message"]
            assert "levels deep" in ready["message"]
            await create(api, make_manifest("good"))
            await eventually(
                lambda: len(children(k, service="good")) == 14,
                timeout_s=30,
                what="the neighbour's children",
            )
            assert children(k, service="deep") == {}
            warnings = [e for e in k.list("v1/events") if e["reason"] == "InvalidSpec"]
            assert warnings and warnings[0]["involvedObject"]["name"] == "deep"
            assert proc.returncode is None
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.communicate(), 30)


async def test_a_service_the_reconciler_fails_on_is_reported_and_its_neighbour_served(
    k: Emulator, api: Api, operators: Any
) -> None:
    """Whatever goes wrong inside one reconcile (a bug the spec triggers) is an Event on
    that resource and a retry with backoff, never the operator's end."""

    def break_one(runtime: Any) -> None:
        real = runtime.reconciler._reconcile

        async def reconcile(key: tuple[str, str]) -> Any:
            if key[1] == "boom":
                raise RuntimeError("a builder bug this spec triggers")
            return await real(key)

        runtime.reconciler._reconcile = reconcile

    op = await operators(setup=break_one)
    await create(api, make_manifest("boom"))
    await create(api, make_manifest("good"))
    failed = await eventually(
        lambda: [e for e in k.list("v1/events") if e["reason"] == "ReconcileFailed"],
        what="the ReconcileFailed Event",
    )
    assert failed[0]["involvedObject"]["name"] == "boom"
    assert "RuntimeError: a builder bug this spec triggers" in failed[0]["message"]
    await eventually(lambda: len(children(k, service="good")) == 14, what="the neighbour")
    assert op.leading() and op.thread.is_alive()
