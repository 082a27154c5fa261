"""The security review's cases on the real API server (``e2e/cluster``): what the CRD's
CEL rules and limits, the chart's ValidatingAdmissionPolicies and its RBAC really do.

Starts its own control plane (the ``cluster`` fixture) unless one is running. Every
check goes to the API server (dry-run creates, ``kubectl auth can-i --as``, patches as
the operator's ServiceAccount); no pod needs to run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart
from hypothesis import HealthCheck, given, settings
from kubernetes.client import ApiException, CustomObjectsApi
from tests.fuzz.corpus import adversarial, base_manifests, mutated_manifests

from cluster.fixtures import Cluster, cluster, namespace, wait_for  # noqa: F401
from tandem.api.rules import OPERATOR_ONLY_RULES
from tandem.api.validate import validate_manifest

REPO = Path(__file__).resolve().parent.parent
CRD = REPO / "crds" / "serving.tandem.dev_inferenceservices.yaml"
GROUP, VERSION, PLURAL = "serving.tandem.dev", "v1alpha1", "inferenceservices"
#: Kinds of the chart applied here (the Deployment and monitoring objects need nothing).
APPLIED_KINDS = {
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
PROMETHEUS = "http://prometheus.monitoring:9090"


def _apply(cluster: Cluster, docs: list[dict[str, Any]], tmp: Path) -> None:  # noqa: F811
    path = tmp / f"apply-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    cluster.run_kubectl("apply", "--server-side", "-f", str(path), timeout_s=60)


@pytest.fixture(scope="module")
def release(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    """The CRD, then the chart's RBAC and admission policies installed in a namespace
    of their own (the release namespace, served by default); its name."""
    tmp = tmp_path_factory.mktemp("policy")
    ns = f"rel-{uuid.uuid4().hex[:6]}"
    cluster.run_kubectl("create", "namespace", ns)
    cluster.run_kubectl("apply", "--server-side", "-f", str(CRD), timeout_s=60)
    cluster.run_kubectl(
        "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s"
    )
    chart = Chart.load(REPO / "charts" / "tandem")
    try:
        rendered = chart.render(
            values={"policy": {"prometheusURLs": [PROMETHEUS]}},
            name="tandem",
            namespace=ns,
            is_install=True,
        )
    finally:
        chart.close()
    docs = [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] in APPLIED_KINDS
    ]
    _apply(cluster, docs, tmp)
    time.sleep(2.0)  # admission policies take effect once the API server has loaded them
    try:
        yield ns
    finally:
        cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for doc in docs:
            if doc["kind"].startswith("ValidatingAdmissionPolicy"):
                cluster.run_kubectl(
                    "delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found",
                    check=False,
                )  # fmt: skip


def _dry_run(cluster: Cluster, ns: str, manifest: dict[str, Any]) -> str | None:  # noqa: F811
    """None when the API server would store ``manifest`` in ``ns``; else its message."""
    body = json.loads(json.dumps(manifest))
    body.setdefault("metadata", {})["namespace"] = ns
    try:
        CustomObjectsApi(cluster.api()).create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            body,
            dry_run="All",
            field_validation="Strict",
            _request_timeout=30,
        )
    except ApiException as err:
        if err.status in (400, 403, 422):
            return str(json.loads(err.body or "{}").get("message") or err.reason)
        raise
    return None


def _beyond_the_server(problems: list[Any]) -> bool:
    """Problems only validate and the operator find: limits and OPERATOR_ONLY_RULES."""
    return all(
        p.kind == "limit" or any(phrase in p.message for phrase in OPERATOR_ONLY_RULES)
        for p in problems
    )


def _agree(cluster: Cluster, ns: str, manifest: dict[str, Any]) -> None:  # noqa: F811
    try:
        json.dumps(manifest, allow_nan=False)
    except (TypeError, ValueError):
        return  # no JSON form: kubectl could not send it (validate refuses it too)
    server = _dry_run(cluster, ns, manifest)
    problems = validate_manifest(manifest)
    if server is not None:
        assert problems, f"the API server refuses ({server}) but validate accepts"
    else:
        assert _beyond_the_server(problems), f"the API server accepts but validate: {problems}"


def test_the_api_server_and_validate_agree_on_the_hand_written_corpus(
    cluster: Cluster,  # noqa: F811
    namespace: str,  # noqa: F811
) -> None:
    """CEL rules included: the real server is the judge (no admission policy binds
    this namespace)."""
    cluster.run_kubectl("apply", "--server-side", "-f", str(CRD), timeout_s=60)
    cluster.run_kubectl(
        "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s"
    )
    cases = [("base", m) for m in base_manifests()] + adversarial()
    started = time.perf_counter()
    for name, manifest in cases:
        try:
            _agree(cluster, namespace, manifest)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None
    print(f"\nAPI server agreement: {len(cases)} manifests in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip


GENERATED = 150
_seen = {"n": 0, "t0": 0.0}


@pytest.fixture(scope="module")
def unbound(cluster: Cluster, release: str) -> Iterator[str]:  # noqa: F811
    """A namespace no admission policy binds, where the CRD alone judges."""
    ns = f"{release}-free"
    cluster.run_kubectl("create", "namespace", ns)
    yield ns
    cluster.run_kubectl("delete", "namespace", ns, "--wait=false", check=False)


@settings(
    max_examples=GENERATED,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(manifest=mutated_manifests())
def test_the_api_server_and_validate_agree_on_generated_manifests(
    cluster: Cluster,  # noqa: F811
    unbound: str,
    manifest: dict[str, Any],
) -> None:
    if _seen["n"] == 0:
        _seen["t0"] = time.perf_counter()
    _seen["n"] += 1
    _agree(cluster, unbound, manifest)
    if _seen["n"] == GENERATED:
        elapsed = time.perf_counter() - _seen["t0"]
        print(f"\nAPI server agreement, generated: {GENERATED} manifests in {elapsed:.1f} s")


def _isvc(name: str, **engine: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"name": "m", "uri": "hf://o/n"}, "engine": engine},
    }


def test_the_admission_policy_refuses_what_the_policy_values_do_not_allow(
    cluster: Cluster,  # noqa: F811
    release: str,
) -> None:
    assert _dry_run(cluster, release, _isvc("ok", image="vllm/vllm-openai:v0.34.0")) is None
    refused = _dry_run(cluster, release, _isvc("evil", image="attacker.example/miner:1"))
    assert refused is not None and "spec.engine.image is not from an allowed" in refused
    secret = _isvc("s")
    secret["spec"]["model"] = {
        "name": "m",
        "uri": "s3://bucket-a/m",
        "secretRef": {"name": "admin"},
    }
    refused = _dry_run(cluster, release, secret)
    assert refused is not None and "must start with tandem-model-" in refused
    secret["spec"]["model"]["secretRef"]["name"] = "tandem-model-s3"
    assert _dry_run(cluster, release, secret) is None
    local = _isvc("laptop")
    local["spec"]["model"]["uri"] = "file:///home/me/tiny-llama"
    refused = _dry_run(cluster, release, local)
    assert refused is not None and "file:// models are served by tandem up only" in refused
    for url, allowed in (
        (PROMETHEUS, True),
        (PROMETHEUS + "/sub", True),
        ("http://prometheus.monitoring:9091", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("http://prometheus.monitoring:9090@evil.example/", False),
    ):
        isvc = _isvc("p")
        isvc["spec"]["autoscaling"] = {"metrics": {"source": "prometheus", "url": url}}
        verdict = _dry_run(cluster, release, isvc)
        assert (verdict is None) == allowed, (url, verdict)


def test_the_operator_account_may_only_set_the_deletion_cost_of_a_pod(
    cluster: Cluster,  # noqa: F811
    release: str,
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "engine", "namespace": release, "labels": {"a": "b"}},
        "spec": {
            "nodeSelector": {"tandem.dev/none": "none"},  # never scheduled, never run
            "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.34.0"}],
        },
    }
    path = cluster.state_dir / f"pod-{release}.json"
    path.write_text(json.dumps(pod))
    cluster.run_kubectl("create", "-f", str(path))
    as_operator = cluster.sa_kubeconfig(release, "tandem-operator")

    def patch(body: Any, kind: str = "merge") -> tuple[int, str]:
        out = cluster.run_kubectl(
            "-n", release, "patch", "pod", "engine", f"--type={kind}", "-p", json.dumps(body),
            kubeconfig=as_operator, check=False,
        )  # fmt: skip
        return out.returncode, out.stderr

    cost = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-5"}}}
    assert patch(cost) == (0, "")
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil.example/x:1"}]
    code, err = patch(image, "json")
    assert code != 0 and "may not change a pod's spec" in err, err
    code, err = patch({"metadata": {"labels": {"serving.tandem.dev/role": "router"}}})
    assert code != 0 and "labels" in err, err
    code, err = patch({"metadata": {"annotations": {"other": "x"}}})
    assert code != 0 and "pod-deletion-cost" in err, err
    assert cluster.run_kubectl("-n", release, "patch", "pod", "engine", "--type=json", "-p",
                               json.dumps(image)).returncode == 0  # an admin still may  # fmt: skip


@pytest.mark.parametrize(
    ("verb", "resource", "where", "allowed"),
    [
        ("create", "deployments", "release", True),
        ("patch", "pods", "release", True),
        ("create", "deployments", "other", False),
        ("patch", "pods", "other", False),
        ("get", "secrets", "release", False),
        ("list", "secrets", "release", False),
        ("create", "pods/exec", "release", False),
        ("create", "clusterroles", "cluster", False),
        ("create", "serviceaccounts/token", "release", False),
        ("update", "inferenceservices", "release", False),
    ],
)
def test_the_operator_account_can_do_what_the_default_install_grants_and_no_more(
    cluster: Cluster,  # noqa: F811
    release: str,
    verb: str,
    resource: str,
    where: str,
    allowed: bool,
) -> None:
    scope = {"release": ["-n", release], "other": ["-n", "default"], "cluster": []}[where]
    kind, _, sub = resource.partition("/")  # kubectl reads TYPE/NAME: pass the subresource
    out = cluster.run_kubectl(
        "auth", "can-i", verb, kind, *([f"--subresource={sub}"] if sub else []), *scope,
        f"--as=system:serviceaccount:{release}:tandem-operator", check=False,
    )  # fmt: skip
    assert out.stdout.strip() == ("yes" if allowed else "no"), (out.stdout, out.stderr)
