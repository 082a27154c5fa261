"""Object lifecycle as the Kubernetes API documents it: create, read, write, delete.

References: https://kubernetes.io/docs/reference/using-api/api-concepts/ (resource
versions, conflicts), https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/object-meta/
(uid, generation, generateName, creationTimestamp, finalizers).
"""

from __future__ import annotations

import re

from tests.support import Emulator
from tests.support.api_client import Api
from tests.support_tests.conftest import DEPLOYMENTS, deployment

WEB = f"{DEPLOYMENTS}/web"


async def test_create_answers_201_with_server_set_metadata(api: Api) -> None:
    status, body = await api.create(DEPLOYMENTS, deployment())
    assert status == 201
    meta = body["metadata"]
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["generation"] == 1
    assert meta["resourceVersion"].isdigit()
    assert meta["namespace"] == "default"
    assert body["kind"] == "Deployment" and body["apiVersion"] == "apps/v1"


async def test_create_ignores_client_supplied_server_fields(api: Api) -> None:
    sent = deployment()
    sent["metadata"] |= {"uid": "mine", "generation": 7, "resourceVersion": "99"}
    _, body = await api.create(DEPLOYMENTS, sent)
    assert body["metadata"]["uid"] != "mine"
    assert body["metadata"]["generation"] == 1


async def test_generate_name_appends_a_random_suffix(api: Api) -> None:
    sent = {"metadata": {"generateName": "web-"}, "spec": {}}
    _, first = await api.create(DEPLOYMENTS, sent)
    _, second = await api.create(DEPLOYMENTS, sent)
    assert re.fullmatch(r"web-[a-z0-9]{5}", first["metadata"]["name"])
    assert first["metadata"]["name"] != second["metadata"]["name"]


async def test_create_without_name_or_generate_name_is_422(api: Api) -> None:
    status, body = await api.create(DEPLOYMENTS, {"metadata": {}, "spec": {}})
    assert (status, body["reason"]) == (422, "Invalid")


async def test_create_of_an_existing_name_is_409_already_exists(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, body = await api.create(DEPLOYMENTS, deployment())
    assert status == 409
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"


async def test_create_with_a_mismatching_namespace_is_400(api: Api) -> None:
    sent = deployment()
    sent["metadata"]["namespace"] = "other"
    status, _ = await api.create(DEPLOYMENTS, sent)
    assert status == 400


async def test_get_of_a_missing_object_is_404_status(api: Api) -> None:
    status, body = await api.get(WEB)
    assert status == 404
    assert body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["details"]["name"] == "web"


async def test_resource_version_is_bumped_on_every_write_from_one_counter(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment("web"))
    _, db = await api.create(DEPLOYMENTS, deployment("db"))
    _, patched = await api.patch(WEB, {"metadata": {"labels": {"tier": "front"}}})
    versions = [int(o["metadata"]["resourceVersion"]) for o in (web, db, patched)]
    assert versions == sorted(versions) and len(set(versions)) == 3


async def test_a_write_that_changes_nothing_keeps_the_resource_version(
    api: Api, k: Emulator
) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    events_before = len(k.store.events)
    _, same = await api.patch(WEB, {"spec": {"replicas": 1}})
    assert same["metadata"]["resourceVersion"] == web["metadata"]["resourceVersion"]
    assert len(k.store.events) == events_before


async def test_generation_is_bumped_by_spec_changes_only(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    _, labelled = await api.patch(WEB, {"metadata": {"labels": {"tier": "front"}}})
    assert labelled["metadata"]["generation"] == 1
    _, status_only = await api.patch(f"{WEB}/status", {"status": {"replicas": 1}})
    assert status_only["metadata"]["generation"] == 1
    _, scaled = await api.patch(WEB, {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2


async def test_a_write_with_a_stale_resource_version_is_409_conflict(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    stale = web["metadata"]["resourceVersion"]
    await api.patch(WEB, {"spec": {"replicas": 2}})
    status, body = await api.patch(
        WEB, {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 5}}
    )
    assert (status, body["reason"]) == (409, "Conflict")
    _, now = await api.get(WEB)
    assert now["spec"]["replicas"] == 2


async def test_a_write_with_the_current_resource_version_succeeds(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    status, body = await api.patch(
        WEB,
        {
            "metadata": {"resourceVersion": web["metadata"]["resourceVersion"]},
            "spec": {"replicas": 5},
        },
    )
    assert status == 200 and body["spec"]["replicas"] == 5


async def test_a_write_with_another_uid_is_409(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, _ = await api.patch(WEB, {"metadata": {"uid": "someone-else"}})
    assert status == 409


async def test_merge_patch_null_removes_a_field(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment(tier="front"))
    _, body = await api.patch(WEB, {"metadata": {"labels": {"tier": None}}})
    assert body["metadata"]["labels"] == {"app": "web"}


async def test_json_patch_is_applied(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    _, body = await api.patch(
        WEB, [{"op": "replace", "path": "/spec/replicas", "value": 4}], kind="json"
    )
    assert body["spec"]["replicas"] == 4


async def test_json_patch_test_op_failure_is_422(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, _ = await api.patch(
        WEB, [{"op": "test", "path": "/spec/replicas", "value": 9}], kind="json"
    )
    assert status == 422


async def test_strategic_merge_patch_is_refused_not_approximated(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, body = await api.patch(WEB, {"spec": {"replicas": 2}}, kind="strategic")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


async def test_put_replaces_the_object_and_removed_fields_vanish(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment(tier="front"))
    web["metadata"]["labels"] = {"app": "web"}
    del web["spec"]["replicas"]
    status, body = await api.put(WEB, web)
    assert status == 200
    assert body["metadata"]["labels"] == {"app": "web"}
    assert "replicas" not in body["spec"]
    assert body["metadata"]["uid"] == web["metadata"]["uid"]


async def test_put_with_a_stale_resource_version_is_409(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    await api.patch(WEB, {"spec": {"replicas": 2}})
    status, _ = await api.put(WEB, web)
    assert status == 409


async def test_put_without_resource_version_is_unconditional(api: Api) -> None:
    _, web = await api.create(DEPLOYMENTS, deployment())
    await api.patch(WEB, {"spec": {"replicas": 2}})
    del web["metadata"]["resourceVersion"]
    status, body = await api.put(WEB, web)
    assert status == 200 and body["spec"]["replicas"] == 1


async def test_delete_removes_the_object(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, body = await api.delete(WEB)
    assert status == 200 and body["status"] == "Success"
    assert (await api.get(WEB))[0] == 404
    assert (await api.delete(WEB))[0] == 404


async def test_delete_honours_uid_preconditions(api: Api) -> None:
    await api.create(DEPLOYMENTS, deployment())
    status, _ = await api.delete(WEB, {"preconditions": {"uid": "another"}})
    assert status == 409
    assert (await api.get(WEB))[0] == 200


async def test_delete_with_finalizers_waits_for_them(api: Api) -> None:
    sent = deployment()
    sent["metadata"]["finalizers"] = ["example.com/cleanup"]
    await api.create(DEPLOYMENTS, sent)
    status, body = await api.delete(WEB)
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    assert (await api.get(WEB))[0] == 200
    await api.patch(WEB, {"metadata": {"finalizers": None}})
    assert (await api.get(WEB))[0] == 404


async def test_cluster_scoped_objects_have_no_namespace(api: Api) -> None:
    status, body = await api.create("/api/v1/persistentvolumes", {"metadata": {"name": "pv"}})
    assert status == 201 and "namespace" not in body["metadata"]
    assert (await api.get("/api/v1/namespaces/x/persistentvolumes/pv"))[0] == 404


async def test_unregistered_resources_are_404(api: Api) -> None:
    status, _ = await api.get("/apis/example.com/v1/namespaces/default/widgets")
    assert status == 404
