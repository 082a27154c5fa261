"""Least privilege: the operator gets exactly what it and the routers it creates use."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.api.validate import load_inference_service
from tandem.kube import CHILD_TYPES
from tandem.manifests import Owner, build_children
from tests.chart.conftest import NAMESPACE, Rendered
from tests.factories import make_manifest

Grant = tuple[str, str, str]
"""(apiGroup, resource, verb)."""

CRUD = ("get", "list", "watch", "create", "patch", "delete")
READ = ("get", "list", "watch")

#: Every permission the operator holds in a namespace it serves, and why.
EXPECTED_NAMESPACED: dict[tuple[str, str], tuple[str, ...]] = {
    # Watched and read; Kopf stores nothing on them (no finalizers, no annotations).
    ("serving.tandem.dev", "inferenceservices"): READ,
    ("serving.tandem.dev", "inferenceservices/status"): ("patch",),
    # Children: watched for drift, created, patched, deleted when no longer desired.
    ("apps", "deployments"): CRUD,
    ("", "services"): CRUD,
    ("", "serviceaccounts"): CRUD,
    ("policy", "poddisruptionbudgets"): CRUD,
    ("networking.k8s.io", "networkpolicies"): CRUD,
    ("rbac.authorization.k8s.io", "roles"): CRUD,
    ("rbac.authorization.k8s.io", "rolebindings"): CRUD,
    ("monitoring.coreos.com", "servicemonitors"): CRUD,
    ("monitoring.coreos.com", "podmonitors"): CRUD,
    # The autoscaler's only write to a pool.
    ("apps", "deployments/scale"): ("get", "patch"),
    # Read, plus the autoscaler's pod-deletion-cost annotation before a scale-down.
    ("", "pods"): (*READ, "patch"),
    ("discovery.k8s.io", "endpointslices"): READ,
    ("", "events"): ("create",),
}
#: The Lease of leader election, in the release namespace only.
EXPECTED_LEASE: dict[tuple[str, str], tuple[str, ...]] = {
    ("coordination.k8s.io", "leases"): ("create", "get", "update"),
}
FORBIDDEN_VERBS = {"*", "bind", "escalate", "impersonate", "deletecollection", "approve", "sign"}
FORBIDDEN_RESOURCES = {
    "secrets",
    "configmaps",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "pods/proxy",
    "services/proxy",
    "nodes",
    "nodes/proxy",
    "serviceaccounts/token",
    "clusterroles",
    "clusterrolebindings",
}


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


def expand(expected: dict[tuple[str, str], tuple[str, ...]]) -> set[Grant]:
    return {(g, r, v) for (g, r), verbs in expected.items() for v in verbs}


def operator_roles(rendered: Rendered) -> list[dict[str, Any]]:
    roles = rendered.of_kind("ClusterRole") + rendered.of_kind("Role")
    return [r for r in roles if not r["metadata"]["name"].endswith("-leader-election")]


def lease_role(rendered: Rendered) -> dict[str, Any]:
    (role,) = [
        r for r in rendered.of_kind("Role") if r["metadata"]["name"].endswith("-leader-election")
    ]
    return role


def test_no_wildcards_secrets_or_escalation_anywhere(rendered: Rendered) -> None:
    for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
                assert not any("*" in item for item in rule[field])
            assert not FORBIDDEN_VERBS & set(rule["verbs"]), rule
            assert not FORBIDDEN_RESOURCES & set(rule["resources"]), rule
            assert "nonResourceURLs" not in rule


def test_operator_holds_exactly_the_expected_permissions(rendered: Rendered) -> None:
    roles = operator_roles(rendered)
    assert roles
    for role in roles:
        assert grants(role["rules"]) == expand(EXPECTED_NAMESPACED), role["metadata"]
        assert all("resourceNames" not in rule for rule in role["rules"])


def test_each_rule_has_distinct_verbs_and_resources(rendered: Rendered) -> None:
    """No duplicated grants hiding in overlapping rules."""
    for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
        seen: set[Grant] = set()
        for rule in role["rules"]:
            mine = grants([rule])
            assert not seen & mine, rule
            seen |= mine


def test_lease_access_is_limited_to_its_name_and_namespace(rendered: Rendered) -> None:
    role = lease_role(rendered)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == expand(EXPECTED_LEASE)
    lease_name = next(
        a.split("=", 1)[1] for a in rendered.container["command"] if a.startswith("--lease-name=")
    )
    for rule in role["rules"]:
        if rule["verbs"] != ["create"]:
            assert rule["resourceNames"] == [lease_name]


def test_cluster_mode_binds_a_cluster_role(renders: dict[str, Rendered]) -> None:
    default = renders["cluster"]
    binding = default.one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": default.one("ClusterRole")["metadata"]["name"],
    }
    _assert_subject_is_operator(default, binding)


@pytest.mark.parametrize("value_set", ["namespaced", "ha-namespaced"])
def test_namespaced_mode_grants_only_in_watched_namespaces(
    renders: dict[str, Rendered], value_set: str
) -> None:
    rendered = renders[value_set]
    watched = rendered.values["watchNamespaces"]
    assert not rendered.of_kind("ClusterRole") and not rendered.of_kind("ClusterRoleBinding")
    roles = operator_roles(rendered)
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(watched)
    bindings = [
        b
        for b in rendered.of_kind("RoleBinding")
        if b["roleRef"]["name"] == roles[0]["metadata"]["name"]
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(watched)
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        _assert_subject_is_operator(rendered, binding)


def _assert_subject_is_operator(rendered: Rendered, binding: dict[str, Any]) -> None:
    sa = rendered.one("ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert (
        rendered.deployment["spec"]["template"]["spec"]["serviceAccountName"]
        == (sa["metadata"]["name"])
    )


def _children() -> list[dict[str, Any]]:
    manifest = make_manifest("chat", "llm", monitoring={"serviceMonitor": True, "podMonitor": True})
    isvc = load_inference_service(manifest)
    return build_children(isvc, Owner(isvc.api_version, isvc.kind, isvc.name, "uid-1"))


def test_operator_can_create_every_kind_the_builders_emit(renders: dict[str, Rendered]) -> None:
    held = grants(operator_roles(renders["default"])[0]["rules"])
    kinds = {(c["apiVersion"], c["kind"]) for c in _children()}
    by_kind = {(t.api_version, t.kind): t for t in CHILD_TYPES}
    for kind in kinds:
        rtype = by_kind[kind]
        for verb in CRUD:
            assert (rtype.group, rtype.plural, verb) in held, (kind, verb)


def test_operator_watches_every_child_type(renders: dict[str, Rendered]) -> None:
    held = grants(operator_roles(renders["default"])[0]["rules"])
    for rtype in CHILD_TYPES:
        assert {(rtype.group, rtype.plural, v) for v in ("list", "watch")} <= held, rtype


def test_operator_holds_what_it_grants_the_router(renders: dict[str, Rendered]) -> None:
    """RBAC's escalation rule: a Role can only be created by someone holding its rules."""
    held = grants(operator_roles(renders["default"])[0]["rules"])
    router_roles = [c for c in _children() if c["kind"] == "Role"]
    assert router_roles
    for role in router_roles:
        missing = grants(role["rules"]) - held
        assert not missing, f"the operator cannot create {role['metadata']['name']}: {missing}"


def test_the_default_install_acts_in_the_release_namespace_only(
    renders: dict[str, Rendered],
) -> None:
    """Item 6 of the security review: no cluster-wide role unless scope: cluster."""
    default = renders["default"]
    assert not default.of_kind("ClusterRole") and not default.of_kind("ClusterRoleBinding")
    assert {r["metadata"]["namespace"] for r in operator_roles(default)} == {NAMESPACE}
    assert "--all-namespaces" not in default.container["command"]


def test_pod_writes_of_the_operator_are_pinned_to_the_deletion_cost(
    renders: dict[str, Rendered],
) -> None:
    """RBAC grants pods/patch whole; the shipped admission policy narrows it."""
    for name in ("default", "cluster", "namespaced"):
        rendered = renders[name]
        (policy,) = [
            p
            for p in rendered.of_kind("ValidatingAdmissionPolicy")
            if p["metadata"]["name"].endswith("-operator-pod-writes")
        ]
        sa = rendered.one("ServiceAccount")["metadata"]["name"]
        (condition,) = policy["spec"]["matchConditions"]
        assert f"system:serviceaccount:{NAMESPACE}:{sa}" in condition["expression"]
        rules = " ".join(v["expression"] for v in policy["spec"]["validations"])
        assert "object.spec == oldObject.spec" in rules
        assert "controller.kubernetes.io/pod-deletion-cost" in rules


def test_the_admission_policy_and_the_operator_read_the_same_policy_values(
    renders: dict[str, Rendered],
) -> None:
    rendered = renders["default"]
    command = rendered.container["command"]
    prefixes = [a.split("=", 1)[1] for a in command if a.startswith("--allowed-image-prefix=")]
    (policy,) = [
        p
        for p in rendered.of_kind("ValidatingAdmissionPolicy")
        if p["metadata"]["name"].endswith("-inferenceservices")
    ]
    images = policy["spec"]["validations"][0]["expression"]
    assert prefixes and all(f"'{p}'" in images for p in prefixes)
    assert "--model-secrets=prefixed" in command
    assert not [a for a in command if a.startswith("--allowed-prometheus-url")]


def test_the_admission_policy_refuses_a_local_model_folder_in_every_install(
    renders: dict[str, Rendered],
) -> None:
    """``file://`` is for ``tandem up``; the API server refuses it as the operator does."""
    checked = 0
    for rendered in renders.values():
        policies = [
            p
            for p in rendered.of_kind("ValidatingAdmissionPolicy")
            if p["metadata"]["name"].endswith("-inferenceservices")
        ]
        for policy in policies:
            rules = [v for v in policy["spec"]["validations"] if "file://" in v["expression"]]
            assert len(rules) == 1, rendered
            assert "spec.model.uri" in rules[0]["message"] and "pvc://" in rules[0]["message"]
            checked += 1
    assert checked >= 3, "no install rendered the InferenceService admission policy"
