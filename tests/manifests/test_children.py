"""Every example renders into children that the upstream Kubernetes schemas accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.manifests import Owner, build_children, build_initial_replicas
from tandem.manifests.meta import SPEC_HASH_ANNOTATION
from tests.factories import make_manifest, with_path

K8S_VERSION = "1.30.0"
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor"}  # Prometheus Operator CRDs, not upstream


def _owner(isvc: InferenceService) -> Owner:
    return Owner(isvc.api_version, isvc.kind, isvc.name, "0f6f2c52-2b8e-4d55-9c8a-6c0d7a3f1e11")


def _children(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    isvc = load_inference_service(manifest)
    return build_children(isvc, _owner(isvc))


def _by(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _examples(repo_root: Path) -> list[Path]:
    return sorted((repo_root / "examples").glob("*.yaml"))


def test_every_example_renders_valid_kubernetes_objects(repo_root: Path) -> None:
    for path in _examples(repo_root):
        children = _children(yaml.safe_load(path.read_text()))
        for child in children:
            if child["kind"] in CUSTOM_KINDS:
                assert child["apiVersion"] == "monitoring.coreos.com/v1"
                continue
            kubernetes_validate.validate(child, K8S_VERSION, strict=True)


def test_latest_schemas_accept_the_children_too() -> None:
    for child in _children(make_manifest()):
        kubernetes_validate.validate(child, kubernetes_validate.latest_version(), strict=True)


def test_disaggregated_children() -> None:
    kinds = sorted(f"{c['kind']}/{c['metadata']['name']}" for c in _children(make_manifest()))
    assert kinds == sorted(
        [
            "ServiceAccount/chat-router",
            "Role/chat-router",
            "RoleBinding/chat-router",
            "Deployment/chat-prefill",
            "Service/chat-prefill",
            "PodDisruptionBudget/chat-prefill",
            "Deployment/chat-decode",
            "Service/chat-decode",
            "PodDisruptionBudget/chat-decode",
            "Deployment/chat-router",
            "Service/chat",
            "PodDisruptionBudget/chat-router",
            "NetworkPolicy/chat-engines",
            "NetworkPolicy/chat-router",
        ]
    )


def test_aggregated_children_have_one_pool() -> None:
    names = {c["metadata"]["name"] for c in _children(make_manifest(mode="aggregated"))}
    assert "chat-pool" in names and "chat-prefill" not in names and "chat-decode" not in names


def test_monitors_only_when_asked() -> None:
    assert not [c for c in _children(make_manifest()) if c["kind"] in CUSTOM_KINDS]
    kinds = {
        c["kind"]
        for c in _children(make_manifest(monitoring={"serviceMonitor": True, "podMonitor": True}))
    }
    assert kinds >= CUSTOM_KINDS


def test_every_child_has_labels_and_a_controller_owner() -> None:
    for child in _children(make_manifest()):
        meta = child["metadata"]
        assert meta["namespace"] == "default"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "tandem"
        assert meta["labels"]["serving.tandem.dev/service"] == "chat"
        assert meta["labels"]["app.kubernetes.io/instance"] == "chat"
        (ref,) = meta["ownerReferences"]
        assert ref["controller"] is True and ref["kind"] == "InferenceService" and ref["uid"]


def test_autoscaled_pools_leave_replicas_out() -> None:
    children = _children(make_manifest(policy="slo"))
    for role in ("prefill", "decode"):
        assert "replicas" not in _by(children, "Deployment", f"chat-{role}")["spec"]
    assert _by(children, "Deployment", "chat-router")["spec"]["replicas"] == 2


def test_static_pools_set_initial_replicas() -> None:
    manifest = with_path(
        make_manifest(policy="static"), "spec.decode.replicas", {"min": 1, "max": 5, "initial": 3}
    )
    deploy = _by(_children(manifest), "Deployment", "chat-decode")
    assert deploy["spec"]["replicas"] == 3
    isvc = load_inference_service(manifest)
    assert build_initial_replicas(isvc) == {"chat-prefill": 1, "chat-decode": 3}


def _template_hash(manifest: dict[str, Any], name: str) -> str:
    deploy = _by(_children(manifest), "Deployment", name)
    return str(deploy["spec"]["template"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION])


def test_spec_hash_rolls_only_the_changed_pool() -> None:
    base = make_manifest()
    changed = with_path(base, "spec.decode.maxNumSeqs", 64)
    assert _template_hash(base, "chat-decode") != _template_hash(changed, "chat-decode")
    assert _template_hash(base, "chat-prefill") == _template_hash(changed, "chat-prefill")
    assert _template_hash(base, "chat-decode") == _template_hash(make_manifest(), "chat-decode")


def test_replica_bounds_do_not_roll_pods() -> None:
    base = make_manifest()
    assert _template_hash(base, "chat-decode") == _template_hash(
        with_path(base, "spec.decode.replicas", {"min": 2, "max": 9}), "chat-decode"
    )


def _engine_container(manifest: dict[str, Any], role: str) -> dict[str, Any]:
    deploy = _by(_children(manifest), "Deployment", f"chat-{role}")
    container: dict[str, Any] = deploy["spec"]["template"]["spec"]["containers"][0]
    return container


def test_vllm_pod_shape() -> None:
    manifest = with_path(make_manifest(), "spec.decode.gpu", {"count": 2})
    c = _engine_container(manifest, "decode")
    assert c["command"][:2] == ["vllm", "serve"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    env = {e["name"]: e for e in c["env"]}
    assert (
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    )
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/dev/shm"}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1800
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    pod = _by(_children(manifest), "Deployment", "chat-decode")["spec"]["template"]["spec"]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert pod["terminationGracePeriodSeconds"] > 30  # longer than vLLM's drain


def test_secret_is_mounted_as_env_never_inlined() -> None:
    manifest = with_path(make_manifest(), "spec.model.secretRef", {"name": "hf", "key": "tok"})
    env = {e["name"]: e for e in _engine_container(manifest, "prefill")["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "tok"}
    assert "value" not in env["HF_TOKEN"]


def test_pvc_source_is_mounted_read_only() -> None:
    manifest = with_path(make_manifest(), "spec.model.uri", "pvc://weights/llama/8b")
    c = _engine_container(manifest, "prefill")
    assert c["command"][c["command"].index("--model") + 1] == "/models/weights/llama/8b"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "models")
    assert mount["readOnly"] is True


def test_sim_backend_runs_on_cpu_as_non_root() -> None:
    manifest = make_manifest(backend="sim")
    c = _engine_container(manifest, "decode")
    assert c["command"][:3] == ["tandem", "engine", "sim"]
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    assert c["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_network_policy_admits_router_peers_and_operator_only() -> None:
    policy = _by(_children(make_manifest()), "NetworkPolicy", "chat-engines")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    sources = [rule["from"][0]["podSelector"]["matchLabels"] for rule in policy["ingress"]]
    assert {"serving.tandem.dev/service": "chat", "serving.tandem.dev/role": "router"} in sources
    assert {"app.kubernetes.io/name": "tandem-operator"} in sources
    peer = next(r for r in policy["ingress"] if "matchExpressions" in r["from"][0]["podSelector"])
    assert "ports" not in peer  # KV side channel and transfer ports between the pools


def test_peers_outside_the_namespace_are_chosen_by_namespace_and_label_together() -> None:
    """A pod label alone is anyone's to set: a pod in another tenant's namespace labelled
    tandem-operator must not reach the engines (and drive a decode engine's KV pulls)."""
    from tandem.api.validate import load_inference_service
    from tandem.manifests import NetworkPeers, build_children

    isvc = load_inference_service(make_manifest(monitoring={"podMonitor": True}))
    peers = NetworkPeers("tandem-system", ("monitoring", "obs"))
    children = build_children(isvc, _owner(isvc), peers)
    policy = _by(children, "NetworkPolicy", "chat-engines")["spec"]
    for rule in policy["ingress"]:
        for source in rule["from"]:
            if "namespaceSelector" in source:
                assert source["namespaceSelector"] != {}, rule
                assert "podSelector" in source, rule
    namespaces = [
        s["namespaceSelector"]["matchExpressions"][0]["values"]
        for r in policy["ingress"]
        for s in r["from"]
        if "namespaceSelector" in s
    ]
    assert namespaces == [["tandem-system"], ["monitoring", "obs"]]
    router = _by(children, "NetworkPolicy", "chat-router")["spec"]
    assert router["podSelector"]["matchLabels"]["serving.tandem.dev/role"] == "router"
    assert router["ingress"] == [{"ports": [{"port": 8000, "protocol": "TCP"}]}]


def test_router_rbac_is_read_only() -> None:
    role = _by(_children(make_manifest()), "Role", "chat-router")
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert all(
        "secrets" not in rule["resources"] and "*" not in rule["resources"]
        for rule in role["rules"]
    )


@pytest.mark.parametrize("mode", ["disaggregated", "aggregated"])
def test_builders_are_deterministic(mode: str) -> None:
    assert _children(make_manifest(mode=mode)) == _children(make_manifest(mode=mode))


@pytest.mark.parametrize("mode", ["disaggregated", "aggregated"])
def test_sim_command_lines_parse_with_the_sim_engine_parser(mode: str) -> None:
    from tandem.cli import build_parser

    manifest = make_manifest(
        backend="sim", mode=mode, engine={"backend": "sim", "schedulingPolicy": "priority"}
    )
    for child in _children(manifest):
        if child["kind"] != "Deployment" or child["metadata"]["name"].endswith("-router"):
            continue
        command = child["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[0] == "tandem"
        args = build_parser().parse_args(command[1:])
        assert args.served_model_name == ["llama"] and args.port == 8000
        assert args.scheduling_policy == "priority"
        env = {e["name"] for e in child["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert ("VLLM_NIXL_SIDE_CHANNEL_HOST" in env) == (mode == "disaggregated")


def test_monitors_add_the_service_and_pool_labels() -> None:
    manifest = make_manifest(monitoring={"serviceMonitor": True, "podMonitor": True})
    children = _children(manifest)
    pod_mon = _by(children, "PodMonitor", "chat-engines")["spec"]["podMetricsEndpoints"][0]
    targets = {r["targetLabel"]: r for r in pod_mon["relabelings"]}
    assert targets["service"]["sourceLabels"] == [
        "__meta_kubernetes_pod_label_serving_tandem_dev_service"
    ]
    assert targets["pool"]["sourceLabels"] == [
        "__meta_kubernetes_pod_label_serving_tandem_dev_role"
    ]
    svc_mon = _by(children, "ServiceMonitor", "chat-router")["spec"]["endpoints"][0]
    assert svc_mon["honorLabels"] is True
    assert {"targetLabel": "pool", "replacement": "router"} in svc_mon["relabelings"]


def test_a_class_that_requires_a_key_mounts_the_class_keys_secret() -> None:
    """The router reads class keys from files, never through the API: the Secret is a
    volume, its account still reads no Secret, and the command line parses."""
    from tandem.cli import build_parser

    classes = [{"name": "std"}, {"name": "gold", "requireKey": True}]
    children = _children(make_manifest(qos={"priorityClasses": classes}))
    pod = _by(children, "Deployment", "chat-router")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["volumes"] == [
        {"name": "class-keys", "secret": {"secretName": "chat-class-keys", "optional": True}}
    ]
    assert container["volumeMounts"] == [
        {"name": "class-keys", "mountPath": "/etc/tandem/class-keys", "readOnly": True}
    ]
    args = build_parser().parse_args(container["command"][1:])
    assert str(args.class_keys) == "/etc/tandem/class-keys" and args.service == "chat"
    kubernetes_validate.validate(
        _by(children, "Deployment", "chat-router"), K8S_VERSION, strict=True
    )
    plain = _by(_children(make_manifest()), "Deployment", "chat-router")["spec"]["template"]
    assert "volumes" not in plain["spec"] and "--class-keys" not in str(plain)
