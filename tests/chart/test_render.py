"""The chart renders, lints clean and produces valid, secure manifests for every value set."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python.chart import Chart, lint
from helm_python.errors import HelmError

from tandem import __version__
from tandem.manifests.images import TANDEM_IMAGE
from tandem.manifests.meta import OPERATOR_POD_LABELS
from tests.chart.conftest import (
    CHART_DIR,
    K8S_VERSIONS,
    NAMESPACE,
    REPO,
    VALUE_SETS,
    Rendered,
    render,
)

CRD_FILE = "serving.tandem.dev_inferenceservices.yaml"
#: Kinds of the Prometheus Operator the chart creates; kubernetes-validate has no schema
#: for them, so :data:`MONITORING_SCHEMAS` checks their structure.
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule"}

_DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}},
}
#: The fields of monitoring.coreos.com/v1 the chart uses, strict: a misspelt field the
#: Prometheus Operator would silently drop fails here.
MONITORING_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    "selector": _LABEL_SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "honorLabels": {"type": "boolean"},
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["expr"],
                                        "oneOf": [
                                            {"required": ["record"]},
                                            {"required": ["alert"]},
                                        ],
                                        "properties": {
                                            "record": {"type": "string"},
                                            "alert": {"type": "string"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": _DURATION,
                                            "labels": _STRING_MAP,
                                            "annotations": _STRING_MAP,
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


def _names(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']} {meta.get('namespace', '')}/{meta['name']}"


# ---------------------------------------------------------------- lint and validity


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint_strict_is_clean(value_set: str) -> None:
    report = lint(
        CHART_DIR,
        VALUE_SETS[value_set],
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{K8S_VERSIONS[0]}",
    )
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); warnings and errors fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [], problems


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_against_kubernetes_schemas(
    rendered: Rendered, version: str
) -> None:
    assert rendered.docs, "nothing rendered"
    for doc in rendered.docs:
        if doc["kind"] in MONITORING_KINDS:
            continue
        # A kind the upstream schemas do not know raises SchemaNotFoundError: no skipping.
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{rendered.name}: {_names(doc)} is invalid for {version}: {err}")


def test_monitoring_objects_have_the_prometheus_operator_structure(rendered: Rendered) -> None:
    for doc in rendered.docs:
        if doc["kind"] in MONITORING_KINDS:
            jsonschema.validate(doc, MONITORING_SCHEMAS[doc["kind"]])


CLUSTER_KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def test_every_object_is_namespaced_to_the_release_or_a_watched_namespace(
    rendered: Rendered,
) -> None:
    allowed = {NAMESPACE, *rendered.values.get("watchNamespaces", [])}
    allowed |= {rendered.values.get("dashboard", {}).get("namespace") or NAMESPACE}
    for doc in rendered.docs:
        if doc["kind"] in CLUSTER_KINDS:
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"].get("namespace") in allowed, _names(doc)


def test_names_are_unique(rendered: Rendered) -> None:
    seen = [
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in rendered.docs
    ]
    assert len(seen) == len(set(seen))


def test_expected_objects_per_value_set(renders: dict[str, Rendered]) -> None:
    def kinds(name: str) -> list[str]:
        return sorted(d["kind"] for d in renders[name].docs)

    assert kinds("default") == sorted(
        [
            "ServiceAccount",
            "Role",  # the operator's, in the release namespace it serves by default
            "RoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Deployment",
            "Service",
            "NetworkPolicy",
            "ServiceMonitor",
            "PrometheusRule",
            "ConfigMap",
        ]
    )
    monitoring = {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert kinds("monitoring-off") == [k for k in kinds("default") if k not in monitoring]
    # Namespaced: a Role and RoleBinding per watched namespace plus the Lease's, no
    # cluster-wide object at all.
    namespaced = renders["namespaced"]
    assert not namespaced.of_kind("ClusterRole") and not namespaced.of_kind("ClusterRoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in namespaced.of_kind("Role")) == sorted(
        ["team-a", "team-b", NAMESPACE]
    )
    assert len(namespaced.of_kind("RoleBinding")) == 3
    # HA adds a PodDisruptionBudget keeping one replica up.
    assert kinds("ha") == sorted([*kinds("default"), "PodDisruptionBudget"])
    pdb = renders["ha"].one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert not renders["default"].of_kind("PodDisruptionBudget")


def test_switching_every_optional_object_off(chart: Chart) -> None:
    off = render(
        chart,
        "everything-off",
        {
            "serviceAccount": {"create": False, "name": "existing"},
            "rbac": {"create": False},
            "networkPolicy": {"enabled": False},
            "metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": False}},
            "prometheusRule": {"enabled": False},
            "dashboard": {"enabled": False},
            "admissionPolicy": {"enabled": False},
        },
    )
    assert [d["kind"] for d in off.docs] == ["Deployment"]
    assert off.deployment["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# ---------------------------------------------------------------- CRDs and metadata


def test_chart_crd_is_the_generated_crd_byte_for_byte() -> None:
    chart_crd = (CHART_DIR / "crds" / CRD_FILE).read_bytes()
    top_level = (REPO / "crds" / CRD_FILE).read_bytes()
    assert chart_crd == top_level, (
        f"charts/tandem/crds/{CRD_FILE} differs from crds/{CRD_FILE}: copy it after `tandem crd`"
    )


def test_chart_crd_is_what_the_models_generate() -> None:
    from tandem.commands.crd import render_crd_yaml

    assert (CHART_DIR / "crds" / CRD_FILE).read_text() == render_crd_yaml()


def test_helm_installs_exactly_the_inferenceservice_crd(chart: Chart) -> None:
    crds = chart.crds
    assert [c["filename"] for c in crds] == [f"tandem/crds/{CRD_FILE}"]
    for crd in crds:
        doc = yaml.safe_load(crd["data"])
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_chart_versions_follow_the_package(chart: Chart) -> None:
    meta = chart.metadata
    assert meta["version"] == "0.1.0"
    assert meta["appVersion"] == __version__ == "0.1.0"


def test_default_image_is_the_one_the_builders_use(renders: dict[str, Rendered]) -> None:
    assert renders["default"].container["image"] == TANDEM_IMAGE


def test_custom_image_and_digest(renders: dict[str, Rendered]) -> None:
    custom = renders["custom-images"]
    assert custom.container["image"] == "registry.example.com/mirror/tandem:0.1.0-patched"
    assert custom.container["imagePullPolicy"] == "Always"
    pod = custom.deployment["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "mirror-credentials"}]
    digest = renders["digest"].container["image"]
    assert digest == "ghcr.io/tandem-serving/tandem@sha256:" + "0123456789abcdef" * 4


# ---------------------------------------------------------------- the operator pod


def test_operator_pods_carry_the_label_engine_network_policies_admit(rendered: Rendered) -> None:
    labels = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    assert OPERATOR_POD_LABELS.items() <= labels.items()


def test_operator_pod_is_hardened(rendered: Rendered) -> None:
    pod = rendered.deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = rendered.container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = rendered.container["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


def test_probes_hit_the_operator_health_endpoint(rendered: Rendered) -> None:
    container = rendered.container
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    liveness = next(a for a in container["command"] if a.startswith("--liveness="))
    assert liveness == f"--liveness=http://0.0.0.0:{ports['health']}/healthz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    assert next(a for a in container["command"] if a.startswith("--metrics-port=")) == (
        f"--metrics-port={ports['metrics']}"
    )


def test_operator_command_parses_with_the_real_cli(rendered: Rendered) -> None:
    from tandem.cli import build_parser

    command = rendered.container["command"]
    assert command[:2] == ["tandem", "operator"]
    args = build_parser().parse_args(command[1:])
    assert args.command == "operator"


def test_log_settings_reach_the_operator(chart: Chart) -> None:
    json_logs = render(chart, "json", {"operator": {"logFormat": "json", "logLevel": "verbose"}})
    assert {"--log-format=json", "--verbose"} <= set(json_logs.container["command"])


def test_watch_scope_follows_watch_namespaces(renders: dict[str, Rendered]) -> None:
    """By default only the release namespace; every namespace only when asked."""
    assert "--all-namespaces" in renders["cluster"].container["command"]
    default = renders["default"].container["command"]
    assert "--all-namespaces" not in default
    assert [a for a in default if a.startswith("--namespace=")] == [f"--namespace={NAMESPACE}"]
    command = renders["namespaced"].container["command"]
    assert "--all-namespaces" not in command
    assert [a for a in command if a.startswith("--namespace=")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]


def test_ha_runs_replicas_behind_one_lease(renders: dict[str, Rendered]) -> None:
    ha = renders["ha"]
    spec = ha.deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    command = ha.container["command"]
    assert "--leader-election" in command
    assert "--lease-name=tandem-operator" in command
    assert f"--lease-namespace={NAMESPACE}" in command
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "kubernetes.io/hostname"
    assert spread[0]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert (
        "topologySpreadConstraints" not in renders["default"].deployment["spec"]["template"]["spec"]
    )


def test_without_leader_election_rollouts_never_overlap(chart: Chart) -> None:
    single = render(chart, "no-election", {"leaderElection": {"enabled": False}})
    assert single.deployment["spec"]["strategy"]["rollingUpdate"] == {
        "maxSurge": 0,
        "maxUnavailable": 1,
    }
    assert "--leader-election" not in single.container["command"]
    assert "--no-leader-election" in single.container["command"]  # the command's default is on
    assert not [r for r in single.of_kind("Role") if "leader" in r["metadata"]["name"]]


# ---------------------------------------------------------------- monitoring objects


def test_prometheus_rule_is_the_alerts_file(renders: dict[str, Rendered]) -> None:
    rule = renders["default"].one("PrometheusRule")
    source = yaml.safe_load((CHART_DIR / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == source


def test_runbook_base_url_is_configurable(chart: Chart) -> None:
    base = "https://wiki.example.com/tandem/runbooks"
    rule = render(chart, "wiki", {"prometheusRule": {"runbookBaseURL": base}}).one("PrometheusRule")
    urls = [
        r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert urls and all(u.startswith(base + "#") for u in urls)


def test_service_monitor_scrapes_the_metrics_service(rendered: Rendered) -> None:
    monitors = rendered.of_kind("ServiceMonitor")
    if not monitors:
        assert rendered.name == "monitoring-off"
        return
    (monitor,) = monitors
    service = next(
        s for s in rendered.of_kind("Service") if s["metadata"]["name"].endswith("-metrics")
    )
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    # job="tandem-operator" whatever the release name: the alerts select on it.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "tandem-operator"
    extra = rendered.values.get("metrics", {}).get("serviceMonitor", {}).get("labels", {})
    assert extra.items() <= monitor["metadata"]["labels"].items()


def test_metrics_service_targets_the_operator_pods(rendered: Rendered) -> None:
    service = next(
        s for s in rendered.of_kind("Service") if s["metadata"]["name"].endswith("-metrics")
    )
    pod_labels = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_dashboard_configmap_is_picked_up_by_the_grafana_sidecar(rendered: Rendered) -> None:
    maps = rendered.of_kind("ConfigMap")
    if not maps:
        assert rendered.name == "monitoring-off"
        return
    (cm,) = maps
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    expected_ns = rendered.values.get("dashboard", {}).get("namespace") or NAMESPACE
    assert cm["metadata"]["namespace"] == expected_ns
    source = json.loads((CHART_DIR / "files" / "dashboard.json").read_text())
    assert json.loads(cm["data"]["tandem.json"]) == source


def test_network_policy_admits_only_the_metrics_port(renders: dict[str, Rendered]) -> None:
    for name in ("default", "ha-namespaced"):
        policy = renders[name].one("NetworkPolicy")
        pod_labels = renders[name].deployment["spec"]["template"]["metadata"]["labels"]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert "from" not in renders["default"].one("NetworkPolicy")["spec"]["ingress"][0]
    assert (
        renders["ha-namespaced"].one("NetworkPolicy")["spec"]["ingress"][0]["from"]
        == (VALUE_SETS["ha-namespaced"]["networkPolicy"]["metricsFrom"])
    )


def test_notes_tell_the_next_command(renders: dict[str, Rendered]) -> None:
    notes = renders["default"].notes
    assert "kubectl -n tandem-system rollout status deployment/tandem-operator" in notes
    # By default the release namespace is the one served: the example goes there.
    assert "serves InferenceServices in tandem-system\n" in notes
    assert "kubectl apply -n tandem-system -f examples/sim.yaml" in notes
    assert "port-forward -n tandem-system service/sim" in notes
    assert "kubectl apply -n team-a -f examples/sim.yaml" in renders["namespaced"].notes
    assert "one leads" in renders["ha"].notes


# ---------------------------------------------------------------- values and schema


def _bad_values() -> list[tuple[str, dict[str, Any], str]]:
    """(case, values, text the error must contain)."""
    return [
        ("unknown top-level key", {"replicas": 2}, "replicas"),
        ("misspelt nested key", {"image": {"repositry": "x"}}, "repositry"),
        ("replicaCount not an integer", {"replicaCount": "two"}, "replicaCount"),
        ("replicaCount zero", {"replicaCount": 0}, "replicaCount"),
        ("bad pull policy", {"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ("digest without algorithm", {"image": {"digest": "abc123"}}, "digest"),
        ("namespace not a DNS label", {"watchNamespaces": ["Team_A"]}, "watchNamespaces"),
        ("duplicate namespaces", {"watchNamespaces": ["a", "a"]}, "watchNamespaces"),
        ("port out of range", {"operator": {"metricsPort": 70000}}, "metricsPort"),
        ("bad log level", {"operator": {"logLevel": "loud"}}, "logLevel"),
        ("bad quantity", {"resources": {"limits": {"memory": "lots"}}}, "memory"),
        ("bad scrape interval", {"metrics": {"serviceMonitor": {"interval": "30"}}}, "interval"),
        (
            "label value not a string",
            {"dashboard": {"labels": {"grafana_dashboard": 1}}},
            "grafana_dashboard",
        ),
        ("enabled not a boolean", {"prometheusRule": {"enabled": "yes"}}, "enabled"),
        (
            "unknown toleration field",
            {"tolerations": [{"key": "gpu", "efect": "NoSchedule"}]},
            "efect",
        ),
        (
            "bad runbook URL",
            {"prometheusRule": {"runbookBaseURL": "docs/runbooks.md"}},
            "runbookBaseURL",
        ),
    ]


@pytest.mark.parametrize(
    ("values", "needle"), [c[1:] for c in _bad_values()], ids=[c[0] for c in _bad_values()]
)
def test_schema_rejects_bad_values(chart: Chart, values: dict[str, Any], needle: str) -> None:
    with pytest.raises(HelmError) as caught:
        chart.render(values=values, name="tandem", namespace=NAMESPACE)
    assert needle in str(caught.value), str(caught.value)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "leaderElection.enabled"),
        ({"operator": {"metricsPort": 9000, "healthPort": 9000}}, "must differ"),
        ({"metrics": {"service": {"enabled": False}}}, "metrics.service.enabled"),
        ({"serviceAccount": {"create": False}}, "serviceAccount.name is required"),
    ],
    ids=["ha-without-election", "same-ports", "monitor-without-service", "no-sa-name"],
)
def test_inconsistent_values_fail_with_a_message(
    chart: Chart, values: dict[str, Any], needle: str
) -> None:
    with pytest.raises(HelmError) as caught:
        chart.render(values=values, name="tandem", namespace=NAMESPACE)
    assert needle in str(caught.value)


def _schema_node(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].split("/")[-1]]
    return node


def test_every_default_value_is_typed_and_objects_are_closed() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    #: Maps whose keys are the user's (labels, annotations, node selectors).
    free_maps = {"podAnnotations", "podLabels", "nodeSelector", "annotations", "labels"}

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        node = _schema_node(schema, node)
        assert "type" in node, f"{path} has no type in values.schema.json"
        if isinstance(value, dict) and path.rsplit(".", 1)[-1] not in free_maps:
            assert node.get("additionalProperties") is False, f"{path} accepts unknown keys"
            for key, child in value.items():
                assert key in node["properties"], f"{path}.{key} missing from the schema"
                walk(child, node["properties"][key], f"{path}.{key}")

    walk(values, schema, "values")
    assert schema["additionalProperties"] is False


def test_defaults_validate_against_the_schema(chart: Chart) -> None:
    chart.validate_schema(chart.values)
    for values in VALUE_SETS.values():
        chart.validate_schema(chart.merge_values(copy.deepcopy(values)))


def test_docs_describe_every_top_level_value() -> None:
    doc = (REPO / "docs" / "chart.md").read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    missing = [key for key in values if f"`{key}" not in doc]
    assert missing == [], f"docs/chart.md does not mention {missing}"
