"""Real clients against the emulator: ``kubernetes_asyncio`` (what ``tandem.kube`` uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from tests.support import Emulator, emulator_url


@pytest.fixture
async def apps(k: Emulator) -> AsyncIterator[client.AppsV1Api]:
    config = client.Configuration(host=emulator_url(k))
    async with client.ApiClient(config) as api_client:
        yield client.AppsV1Api(api_client)


def _body() -> client.V1Deployment:
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web", labels={"app": "web"}),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "web"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "web"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")]),
            ),
        ),
    )


async def test_typed_create_returns_the_created_object(apps: client.AppsV1Api) -> None:
    created = await apps.create_namespaced_deployment("default", _body())
    assert created.metadata.uid and created.metadata.generation == 1


async def test_typed_list_read_scale_and_delete(apps: client.AppsV1Api) -> None:
    await apps.create_namespaced_deployment("default", _body())
    listed = await apps.list_namespaced_deployment("default", label_selector="app=web")
    assert [d.metadata.name for d in listed.items] == ["web"]
    await apps.patch_namespaced_deployment_scale(
        name="web",
        namespace="default",
        body={"spec": {"replicas": 3}},
        _content_type="application/merge-patch+json",
    )
    scale = await apps.read_namespaced_deployment_scale(name="web", namespace="default")
    assert scale.spec.replicas == 3
    await apps.delete_namespaced_deployment(name="web", namespace="default")
    assert (await apps.list_namespaced_deployment("default")).items == []


async def test_typed_conflict_raises_api_exception_409(apps: client.AppsV1Api) -> None:
    created = await apps.create_namespaced_deployment("default", _body())
    await apps.patch_namespaced_deployment(
        name="web",
        namespace="default",
        body={"spec": {"replicas": 2}},
        _content_type="application/merge-patch+json",
    )
    stale = {
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "spec": {"replicas": 5},
    }
    with pytest.raises(client.ApiException) as err:
        await apps.patch_namespaced_deployment(
            name="web",
            namespace="default",
            body=stale,
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 409
