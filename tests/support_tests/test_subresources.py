"""The status and scale subresources.

References: https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#subresources
("PUT/POST/PATCH requests to the custom resource ignore changes to the status stanza";
"requests to the /status subresource ignore changes to anything except the status
stanza"); the Scale object: https://kubernetes.io/docs/reference/kubernetes-api/autoscaling-resources/scale-v1/
"""

from __future__ import annotations

from tests.support import Emulator
from tests.support.api_client import Api
from tests.support_tests.conftest import DEPLOYMENTS, deployment

WEB = f"{DEPLOYMENTS}/web"
ISVCS = "/apis/serving.tandem.dev/v1alpha1/namespaces/default/inferenceservices"


async def test_status_subresource_write_touches_only_status(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, body = await api.patch(
        f"{WEB}/status",
        {
            "metadata": {"labels": {"sneaky": "yes"}},
            "spec": {"replicas": 9},
            "status": {"readyReplicas": 1},
        },
    )
    assert status == 200
    assert body["status"] == {"readyReplicas": 1}
    assert body["spec"]["replicas"] == 1
    assert "sneaky" not in body["metadata"]["labels"]


async def test_main_resource_write_ignores_status(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    await api.patch(f"{WEB}/status", {"status": {"readyReplicas": 1}})
    _, body = await api.patch(WEB, {"spec": {"replicas": 2}, "status": {"readyReplicas": 7}})
    assert body["status"] == {"readyReplicas": 1}
    assert body["spec"]["replicas"] == 2


async def test_create_drops_status_when_there_is_a_status_subresource(api: Api) -> None:
    sent = deployment()
    sent["status"] = {"readyReplicas": 3}
    _, body = await api.create(DEPLOYMENTS, sent)
    assert "status" not in body


async def test_status_put_replaces_status(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    await api.patch(f"{WEB}/status", {"status": {"readyReplicas": 1, "replicas": 1}})
    _, web = await api.get(WEB)
    web["status"] = {"replicas": 2}
    _, body = await api.put(f"{WEB}/status", web)
    assert body["status"] == {"replicas": 2}


async def test_status_write_with_a_stale_resource_version_is_409(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    await api.patch(WEB, {"spec": {"replicas": 2}})
    status, _ = await api.patch(
        f"{WEB}/status",
        {
            "metadata": {"resourceVersion": web["metadata"]["resourceVersion"]},
            "status": {"replicas": 1},
        },
    )
    assert status == 409


async def test_custom_resource_status_subresource(api: Api) -> None:
    await api.create(
        ISVCS,
        {
            "apiVersion": "serving.tandem.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "chat"},
            "spec": {"mode": "aggregated"},
        },
    )
    status, body = await api.patch(f"{ISVCS}/chat/status", {"status": {"routerURL": "x"}})
    assert status == 200 and body["status"] == {"routerURL": "x"}
    assert body["metadata"]["generation"] == 1


async def test_scale_get_shows_replicas_as_an_autoscaling_v1_scale(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment(replicas=2))
    await api.patch(f"{WEB}/status", {"status": {"replicas": 2}})
    status, body = await api.get(f"{WEB}/scale")
    assert status == 200
    assert (body["apiVersion"], body["kind"]) == ("autoscaling/v1", "Scale")
    assert body["spec"] == {"replicas": 2}
    assert body["status"] == {"replicas": 2, "selector": "app=web"}


async def test_scale_patch_sets_spec_replicas_and_bumps_generation(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment(replicas=1))
    status, body = await api.patch(f"{WEB}/scale", {"spec": {"replicas": 4}})
    assert status == 200 and body["spec"] == {"replicas": 4}
    _, web = await api.get(WEB)
    assert web["spec"]["replicas"] == 4
    assert web["metadata"]["generation"] == 2
    assert body["metadata"]["resourceVersion"] == web["metadata"]["resourceVersion"]


async def test_scale_put_with_a_stale_resource_version_is_409(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment(replicas=1))
    _, scale = await api.get(f"{WEB}/scale")
    await api.patch(WEB, {"spec": {"replicas": 2}})
    scale["spec"]["replicas"] = 5
    status, _ = await api.put(f"{WEB}/scale", scale)
    assert status == 409


async def test_scale_rejects_negative_replicas(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, _ = await api.patch(f"{WEB}/scale", {"spec": {"replicas": -1}})
    assert status == 422


async def test_scale_of_a_deployment_without_replicas_shows_no_spec_replicas(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment(replicas=None))
    _, body = await api.get(f"{WEB}/scale")
    assert body["spec"] == {}


async def test_subresources_a_resource_lacks_are_404(api: Api) -> None:
    await api.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c"}})
    status, _ = await api.get("/api/v1/namespaces/default/configmaps/c/scale")
    assert status == 404


async def test_controllers_can_write_status_in_process(api: Api, k: Emulator) -> None:
    await api.create(DEPLOYMENTS, deployment())
    k.patch_object(
        "apps/v1/deployments", "default", "web", {"status": {"replicas": 1}}, subresource="status"
    )
    _, web = await api.get(WEB)
    assert web["status"] == {"replicas": 1}
