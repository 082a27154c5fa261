"""Client-side apply (pure): no write when in sync, removed fields vanish, hand-offs kept."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kube.semantic import (
    LAST_APPLIED_ANNOTATION,
    compute_apply_patch,
    last_applied,
    parse_quantity,
    with_last_applied,
)
from tests.support.kube_semantics import merge_patch


def deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def applied(desired: dict[str, Any], **server: Any) -> dict[str, Any]:
    """What the API server stores after creating ``desired``, plus server additions."""
    live = with_last_applied(desired)
    live["metadata"] |= {"uid": "u", "resourceVersion": "5", "generation": 1}
    return merge_patch(live, server)  # type: ignore[no-any-return]


def test_in_sync_despite_server_set_fields_means_no_patch() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "a"},
        "spec": {"ports": [{"port": 80, "targetPort": "http"}]},
    }
    live = applied(
        desired,
        spec={
            "clusterIP": "10.0.0.7",
            "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
        status={"loadBalancer": {}},
    )
    assert compute_apply_patch(desired, live) is None


def test_a_changed_field_is_the_only_thing_patched() -> None:
    live = applied(deployment(replicas=1, revisionHistoryLimit=3))
    patch = compute_apply_patch(deployment(replicas=1, revisionHistoryLimit=5), live)
    assert patch is not None
    assert patch["spec"] == {"revisionHistoryLimit": 5}
    assert set(patch["metadata"]) == {"annotations"}


def test_a_field_removed_from_desired_is_removed_from_live() -> None:
    live = applied(deployment(paused=True, minReadySeconds=5))
    patch = compute_apply_patch(deployment(minReadySeconds=5), live)
    assert patch is not None and patch["spec"] == {"paused": None}


def test_a_label_removed_from_desired_is_removed() -> None:
    desired = deployment()
    desired["metadata"]["labels"]["tier"] = "front"
    live = applied(desired)
    patch = compute_apply_patch(deployment(), live)
    assert patch is not None and patch["metadata"]["labels"] == {"tier": None}


def test_fields_someone_else_added_are_left_alone() -> None:
    live = applied(
        deployment(), metadata={"labels": {"team": "infra"}, "annotations": {"note": "x"}}
    )
    assert compute_apply_patch(deployment(), live) is None


def test_replicas_are_never_written_when_desired_leaves_them_out() -> None:
    live = applied(deployment(), spec={"replicas": 7})
    assert compute_apply_patch(deployment(), live) is None


def test_replicas_set_by_a_static_policy_are_kept_when_autoscaling_takes_over() -> None:
    live = applied(deployment(replicas=2))
    patch = compute_apply_patch(deployment(), live)
    assert patch is not None and "replicas" not in patch.get("spec", {})


def test_other_kinds_get_their_removed_fields_removed() -> None:
    before = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": 3},
    }
    live = applied(before)
    patch = compute_apply_patch({**before, "spec": {}}, live)
    assert patch is not None and patch["spec"] == {"replicas": None}


def test_a_list_is_replaced_whole_when_an_item_differs() -> None:
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    live = applied(deployment(env=env))
    patch = compute_apply_patch(deployment(env=[env[0], {"name": "B", "value": "3"}]), live)
    assert patch is not None and patch["spec"]["env"] == [env[0], {"name": "B", "value": "3"}]


def test_a_field_removed_inside_a_list_item_is_removed() -> None:
    before = [{"name": "c", "image": "i", "args": ["--x"]}]
    live = applied(deployment(containers=before))
    after = [{"name": "c", "image": "i"}]
    patch = compute_apply_patch(deployment(containers=after), live)
    assert patch is not None and patch["spec"]["containers"] == after


def test_list_items_may_carry_server_defaults() -> None:
    desired = deployment(containers=[{"name": "c", "image": "i"}])
    live = applied(
        desired,
        spec={
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                }
            ]
        },
    )
    assert compute_apply_patch(desired, live) is None


def test_quantities_compare_by_value() -> None:
    desired = deployment(resources={"limits": {"cpu": "1000m", "memory": "1Gi"}})
    live = applied(desired, spec={"resources": {"limits": {"cpu": "1", "memory": "1024Mi"}}})
    assert compute_apply_patch(desired, live) is None
    other = deployment(resources={"limits": {"cpu": "2", "memory": "1Gi"}})
    assert compute_apply_patch(other, live) is not None


def test_quantity_parsing() -> None:
    assert parse_quantity("500m") == parse_quantity("0.5")
    assert parse_quantity("1Ki") == 1024
    assert parse_quantity("1e3") == parse_quantity("1k") == 1000
    assert parse_quantity("eight") is None
    assert parse_quantity(True) is None


def test_an_object_never_applied_by_tandem_gets_the_record_only() -> None:
    desired = deployment(replicas=1)
    live = copy.deepcopy(desired) | {"status": {}}
    patch = compute_apply_patch(desired, live)
    assert patch == {
        "metadata": {
            "annotations": {
                LAST_APPLIED_ANNOTATION: with_last_applied(desired)["metadata"]["annotations"][
                    LAST_APPLIED_ANNOTATION
                ]
            }
        }
    }


def test_the_record_is_canonical_and_excludes_itself() -> None:
    first = with_last_applied(deployment(replicas=1))
    again = with_last_applied(first)
    assert first == again
    record = json.loads(first["metadata"]["annotations"][LAST_APPLIED_ANNOTATION])
    assert "annotations" not in record["metadata"]
    assert last_applied(first) == record


def test_none_in_desired_is_not_a_removal() -> None:
    live = applied(deployment(paused=True))
    assert compute_apply_patch(deployment(paused=True, minReadySeconds=None), live) is None


def _covers(want: Any, have: Any) -> bool:
    """``have`` carries ``want`` (mappings may hold more keys: others' fields)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and _covers(v, have[k]) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_covers(w, h) for w, h in zip(want, have, strict=True))
        )
    return bool(want == have and type(want) is type(have))


json_leaf = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from(["a", "b", "1Gi"]))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["p", "q", "r"]), inner, max_size=3),
    ),
    max_leaves=8,
)
specs = st.dictionaries(st.sampled_from(["a", "b", "c", "replicas"]), json_value, max_size=4)


@settings(max_examples=400, deadline=None)
@given(before=specs, after=specs, drift=specs)
def test_applying_the_patch_converges(
    before: dict[str, Any], after: dict[str, Any], drift: dict[str, Any]
) -> None:
    """Whatever was applied before and whatever drifted since, one patch brings the live
    object to the desired state: the next computation finds nothing to write."""
    old = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": before,
    }
    live = merge_patch(applied(old), {"spec": drift})
    new = {**old, "spec": after}
    patch = compute_apply_patch(new, live)
    patched = merge_patch(live, patch) if patch else live
    assert compute_apply_patch(new, patched) is None
    for key, value in after.items():
        assert _covers(value, patched["spec"][key])
    for key in set(before) - set(after):
        assert key not in patched["spec"]


def _deployment(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": pod}},
    }


def test_the_pod_template_is_owned_whole_but_server_defaults_are_not_drift() -> None:
    desired = _deployment(
        {
            "serviceAccountName": "r",
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "ports": [{"containerPort": 80}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                }
            ],
        }
    )
    live = with_last_applied(desired)
    pod = live["spec"]["template"]["spec"]
    pod.update(
        dnsPolicy="ClusterFirst",
        restartPolicy="Always",
        schedulerName="default-scheduler",
        terminationGracePeriodSeconds=30,
        securityContext={},
        serviceAccount="r",
    )
    c = pod["containers"][0]
    c.update(terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File")
    c.update(imagePullPolicy="IfNotPresent", resources={})
    c["ports"][0]["protocol"] = "TCP"
    c["readinessProbe"].update(timeoutSeconds=1, periodSeconds=10, successThreshold=1)
    c["readinessProbe"].update(failureThreshold=3)
    c["readinessProbe"]["httpGet"]["scheme"] = "HTTP"
    c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    assert compute_apply_patch(desired, live) is None

    pod.update(hostPID=True, initContainers=[{"name": "x", "image": "busybox"}])
    pod["securityContext"] = {"runAsUser": 0}
    c["securityContext"] = {"privileged": True}
    patch = compute_apply_patch(desired, live)
    assert patch is not None
    spec = patch["spec"]["template"]["spec"]
    assert spec["hostPID"] is None and spec["initContainers"] is None
    assert spec["securityContext"] is None  # not set by Tandem: removed whole
    assert "securityContext" not in spec["containers"][0]
    assert "metadata" not in patch["spec"]["template"]


def test_template_annotations_added_by_others_are_kept() -> None:
    desired = _deployment({"containers": [{"name": "c", "image": "i"}]})
    live = with_last_applied(desired)
    live["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "t"}
    assert compute_apply_patch(desired, live) is None
