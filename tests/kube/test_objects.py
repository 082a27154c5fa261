"""``apply_object`` against the emulated API server over loopback HTTP: conflicts."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.kube import KubeClient, KubeError, apply_object
from tandem.kube import objects as objects_module
from tests.support import Emulator, FaultRule

pytestmark = pytest.mark.asyncio


def deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
            **spec,
        },
    }


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objects_module, "CONFLICT_BACKOFF_S", (0.0, 0.0, 0.0, 0.0))


def patches(k: Emulator) -> int:
    return sum(1 for f in k.faults.log if f.method == "PATCH")


async def test_a_busy_writer_is_waited_out(k: Emulator, client: KubeClient) -> None:
    """A Deployment's controller writing status while it scales moves the resourceVersion
    between our read and our write, several times over (it took three tries to fail)."""
    created = await apply_object(client, deployment(minReadySeconds=0))
    k.faults.add(FaultRule(status=409, methods={"PATCH"}, limit=4))
    result = await apply_object(client, deployment(minReadySeconds=1), created.object)
    assert result.verb == "patch" and result.changed == ("spec.minReadySeconds",)
    assert patches(k) == 4
    assert result.object["spec"]["minReadySeconds"] == 1


async def test_conflicts_that_never_end_are_an_error(k: Emulator, client: KubeClient) -> None:
    created = await apply_object(client, deployment(minReadySeconds=0))
    k.faults.add(FaultRule(status=409, methods={"PATCH"}))
    with pytest.raises(KubeError) as err:
        await apply_object(client, deployment(minReadySeconds=1), created.object)
    assert err.value.conflict
    assert patches(k) == len(objects_module.CONFLICT_BACKOFF_S) + 1
