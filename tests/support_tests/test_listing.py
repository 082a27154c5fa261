"""Lists and selectors.

References: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors,
https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/, and
list responses carrying ``kind``/``apiVersion``/``metadata.resourceVersion``
(https://kubernetes.io/docs/reference/using-api/api-concepts/#collections).
"""

from __future__ import annotations

import urllib.parse

import pytest

from tests.support.api_client import Api
from tests.support_tests.conftest import DEPLOYMENTS, deployment


async def _names(api: Api, query: str) -> list[str]:
    status, body = await api.get(f"{DEPLOYMENTS}?{query}")
    assert status == 200, body
    return [o["metadata"]["name"] for o in body["items"]]


@pytest.fixture
async def three(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment("a", tier="front", env="prod"))
    await api.create(DEPLOYMENTS, deployment("b", tier="back", env="prod"))
    await api.create(DEPLOYMENTS, deployment("c", tier="back"))


async def test_list_carries_kind_api_version_and_resource_version(api: Api, three: None) -> None:
    _, body = await api.get(DEPLOYMENTS)
    assert body["kind"] == "DeploymentList" and body["apiVersion"] == "apps/v1"
    assert body["metadata"]["resourceVersion"] == "3"
    assert [o["metadata"]["name"] for o in body["items"]] == ["a", "b", "c"]


async def test_core_list_has_api_version_v1(api: Api) -> None:
    _, body = await api.get("/api/v1/namespaces/default/configmaps")
    assert (body["apiVersion"], body["kind"]) == ("v1", "ConfigMapList")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=back", ["b", "c"]),
        ("tier==back", ["b", "c"]),
        ("tier!=back", ["a"]),
        ("tier in (front,back),env=prod", ["a", "b"]),
        ("tier notin (front)", ["b", "c"]),
        ("env", ["a", "b"]),
        ("!env", ["c"]),
    ],
)
async def test_label_selector_on_list(
    api: Api, three: None, selector: str, expected: list[str]
) -> None:
    query = urllib.parse.urlencode({"labelSelector": selector})
    assert await _names(api, query) == expected


async def test_a_malformed_label_selector_is_400(api: Api) -> None:
    status, _ = await api.get(f"{DEPLOYMENTS}?labelSelector=%3D%3Dx")
    assert status == 400


async def test_field_selector_on_name(api: Api, three: None) -> None:
    assert await _names(api, "fieldSelector=metadata.name%3Db") == ["b"]
    assert await _names(api, "fieldSelector=metadata.name!%3Db") == ["a", "c"]


async def test_unsupported_field_selector_is_400(api: Api) -> None:
    status, _ = await api.get(f"{DEPLOYMENTS}?fieldSelector=spec.replicas%3D1")
    assert status == 400


async def test_list_across_namespaces(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment("a"))
    await api.create("/apis/apps/v1/namespaces/other/deployments", deployment("b"))
    _, everywhere = await api.get("/apis/apps/v1/deployments")
    _, default = await api.get(DEPLOYMENTS)
    assert len(everywhere["items"]) == 2 and len(default["items"]) == 1
