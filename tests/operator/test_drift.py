"""Drift: children edited or deleted by someone else are restored; replicas are not."""

from __future__ import annotations

from tests.factories import make_manifest
from tests.operator.helpers import (
    DEPLOY,
    child_writes,
    children,
    create,
    isvc,
    resync,
)
from tests.support import Emulator, eventually, stays
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator, settle

PREFILL = "/apis/apps/v1/namespaces/default/deployments/chat-prefill"


async def _ready(k: Emulator, api: Api, op: RunningOperator, **spec: object) -> None:
    await create(api, make_manifest("chat", **spec))
    await eventually(lambda: len(children(k)) == 14 and isvc(k, "chat").get("status"))
    await settle(op, k)


def _image(k: Emulator, name: str) -> str:
    obj = k.fetch(DEPLOY, "default", name)
    assert obj is not None
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


async def test_a_deleted_child_is_recreated(k: Emulator, api: Api, op: RunningOperator) -> None:
    await _ready(k, api, op)
    uid = k.fetch(DEPLOY, "default", "chat-decode")["metadata"]["uid"]  # type: ignore[index]
    k.delete_object(DEPLOY, "default", "chat-decode")
    again = await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"))
    assert again["metadata"]["uid"] != uid
    assert again["spec"]["replicas"] == 1


async def test_an_edited_child_is_restored_and_foreign_fields_are_kept(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    original = _image(k, "chat-prefill")
    status, _ = await api.patch(
        PREFILL,
        {
            "metadata": {"labels": {"team": "infra"}},
            "spec": {"template": {"spec": {"containers": [{"name": "engine", "image": "x:y"}]}}},
        },
    )
    assert status == 200
    await eventually(lambda: _image(k, "chat-prefill") == original, what="the image back")
    labels = k.fetch(DEPLOY, "default", "chat-prefill")["metadata"]["labels"]  # type: ignore[index]
    assert labels["team"] == "infra"


async def test_a_child_that_lost_its_labels_is_taken_back(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    status, _ = await api.patch(
        PREFILL, {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    )
    assert status == 200
    await eventually(
        lambda: (
            k.fetch(DEPLOY, "default", "chat-prefill")["metadata"][  # type: ignore[index]
                "labels"
            ].get("app.kubernetes.io/managed-by")
            == "tandem"
        ),
        what="the label back",
    )


async def test_replicas_set_by_someone_else_are_left_alone_when_autoscaled(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op)
    mark = k.mark()
    status, _ = await api.patch(f"{PREFILL}/scale", {"spec": {"replicas": 5}})
    assert status == 200
    resync(op)
    await settle(op, k)
    await stays(
        lambda: k.fetch(DEPLOY, "default", "chat-prefill")["spec"]["replicas"] == 5,  # type: ignore[index]
        for_s=0.5,
        what="replicas 5",
    )
    assert [w for w in child_writes(k, op, mark) if not w.endswith("/status")] == []


async def test_replicas_are_restored_when_the_policy_is_static(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op, autoscaling={"policy": "static"})
    status, _ = await api.patch(f"{PREFILL}/scale", {"spec": {"replicas": 5}})
    assert status == 200
    await eventually(
        lambda: (
            k.fetch(DEPLOY, "default", "chat-prefill")["spec"][  # type: ignore[index]
                "replicas"
            ]
            == 1
        ),
        what="replicas back to 1",
    )


async def test_switching_to_autoscaling_keeps_the_current_replicas(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    await _ready(k, api, op, autoscaling={"policy": "static"})
    status, _ = await api.patch(f"{PREFILL}/scale", {"spec": {"replicas": 1}})
    mark = k.mark()
    status, _ = await api.patch(
        "/apis/serving.tandem.dev/v1alpha1/namespaces/default/inferenceservices/chat",
        {"spec": {"autoscaling": {"policy": "slo"}}},
    )
    assert status == 200
    await eventually(lambda: isvc(k, "chat")["status"]["observedGeneration"] == 2)
    await settle(op, k)
    assert k.fetch(DEPLOY, "default", "chat-prefill")["spec"]["replicas"] == 1  # type: ignore[index]
    deployment_writes = k.writes(mark, agent=op.user_agent, plural="deployments")
    assert deployment_writes, "the last-applied record changes"
    assert all("replicas" not in (e.body.get("spec") or {}) for e in deployment_writes)


async def test_powers_added_by_hand_to_an_engine_pod_template_are_removed(
    k: Emulator, api: Api, op: RunningOperator
) -> None:
    """The pod template is owned whole: fields Tandem never set do not stay."""
    await _ready(k, api, op)
    live = k.fetch(DEPLOY, "default", "chat-prefill")
    assert live is not None
    containers = live["spec"]["template"]["spec"]["containers"]
    hacked = [
        {
            **containers[0],
            "securityContext": {
                **containers[0]["securityContext"],
                "privileged": True,
                "capabilities": {"add": ["SYS_ADMIN"]},
                "runAsUser": 0,
            },
        }
    ]
    status, _ = await api.patch(
        PREFILL,
        {
            "metadata": {"annotations": {"team": "infra"}},
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
                    "spec": {
                        "hostPID": True,
                        "hostNetwork": True,
                        "securityContext": {"runAsUser": 0},
                        "initContainers": [{"name": "x", "image": "busybox"}],
                        "containers": hacked,
                    },
                }
            },
        },
    )
    assert status == 200

    def clean() -> bool:
        obj = k.fetch(DEPLOY, "default", "chat-prefill")
        assert obj is not None
        pod = obj["spec"]["template"]["spec"]
        context = pod["containers"][0]["securityContext"]
        return not (
            {"hostPID", "hostNetwork", "initContainers"} & set(pod)
            or "runAsUser" in pod["securityContext"]
            or {"privileged", "runAsUser"} & set(context)
            or "add" in context.get("capabilities", {})
        )

    await eventually(clean, what="the hand-added fields gone")
    obj = k.fetch(DEPLOY, "default", "chat-prefill")
    assert obj is not None
    assert obj["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert obj["metadata"]["annotations"]["team"] == "infra"
    await settle(op, k)
    mark = k.mark()
    resync(op)
    await settle(op, k)
    assert child_writes(k, op, mark) == [], "a cleaned template is not written again"
