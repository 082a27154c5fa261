"""Security scan (checkov) of the rendered chart, of InferenceService children and of the
Dockerfiles: no failed check, and every suppression carries its reason.

Suppressions live next to what they excuse: ``checkov.io/skipN`` annotations in the chart
templates, ``checkov:skip`` comments in the Dockerfiles, and :data:`BUILDER_SKIPS` below
for the children the operator builds (checkov cannot see annotations the builders do not
emit, and they should not carry scanner annotations into users' clusters).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.api.validate import load_inference_service
from tandem.manifests import Owner, build_children
from tests.chart.conftest import REPO, Rendered, find_tool
from tests.factories import make_manifest

CHECKOV_HINT = (
    "install checkov into its own virtual environment and put it on PATH "
    "(python3 -m venv /opt/checkov && /opt/checkov/bin/pip install checkov && "
    "ln -s /opt/checkov/bin/checkov /usr/local/bin/checkov); it cannot share the "
    "project's environment (it pins packaging<24, pytest needs >=24)"
)
#: Namespace the children are rendered into (the examples say `default`, which
#: CKV_K8S_21 rightly flags; where a service runs is the user's choice, not the builders').
CHILD_NAMESPACE = "llm"

#: (check, what it fails on) → why the builders' output is right as it is.
BUILDER_SKIPS: dict[tuple[str, str], str] = {
    ("CKV_K8S_43", "router"): "images are pinned by version tag (Tandem's release, vLLM "
    "v0.34.0); spec.router.image and spec.engine.image accept name@sha256 digests",
    ("CKV_K8S_43", "vllm-engine"): "as for the router: the pinned vllm/vllm-openai release "
    "tag, or a digest through spec.engine.image",
    ("CKV_K8S_43", "sim-engine"): "as for the router: Tandem's release tag",
    ("CKV_K8S_15", "router"): "imagePullPolicy is left to Kubernetes (IfNotPresent for "
    "version tags): release tags are immutable, and pulling on every start would add to "
    "cold starts the autoscaler waits for",
    ("CKV_K8S_15", "vllm-engine"): "as for the router; the vLLM image is many GB, so "
    "always pulling would add minutes to every scale-up",
    ("CKV_K8S_15", "sim-engine"): "as for the router",
    ("CKV_K8S_11", "router"): "no CPU limit on the latency-critical router: CFS throttling "
    "shows up directly as TTFT/ITL tail latency; CPU is requested and memory limited",
    ("CKV_K8S_11", "vllm-engine"): "no CPU limit on GPU engines: a throttled scheduler "
    "thread stalls the GPU; CPU is requested, memory and GPUs are limited",
    ("CKV_K8S_38", "router"): "the router reads its pods and its InferenceService from the "
    "API (its own read-only Role), so it needs its ServiceAccount token",
    ("CKV_K8S_23", "vllm-engine"): "the vllm/vllm-openai image runs as root; its "
    "containers drop all capabilities and forbid privilege escalation (the sim engine "
    "and the router run as UID 10001)",
    ("CKV_K8S_40", "vllm-engine"): "same cause as CKV_K8S_23: the vLLM image's user",
    ("CKV_K8S_22", "vllm-engine"): "vLLM, torch.compile and Triton write caches inside "
    "the image's filesystem; the sim engine and the router are read-only",
    ("CKV_K8S_35", "vllm-engine"): "model credentials (spec.model.secretRef) reach vLLM as "
    "the environment variables huggingface_hub and the S3 loader read (HF_TOKEN, AWS_*); "
    "never logged or copied into status",
}


def _child_manifests() -> dict[str, dict[str, Any]]:
    """The shipped examples plus built variants: every backend, mode and monitor."""
    manifests: dict[str, dict[str, Any]] = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for i, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            manifests[f"{path.stem}-{i}"] = doc
    manifests["built-aggregated-sim"] = make_manifest(
        "agg", mode="aggregated", backend="sim", monitoring={"podMonitor": True}
    )
    manifests["built-monitored-vllm"] = make_manifest(
        "mon",
        monitoring={"serviceMonitor": True, "podMonitor": True},
        model={
            "name": "llama",
            "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
            "secretRef": {"name": "hf-token"},
        },
    )
    for manifest in manifests.values():
        manifest["metadata"]["namespace"] = CHILD_NAMESPACE
    return manifests


def _children() -> Iterator[dict[str, Any]]:
    for manifest in _child_manifests().values():
        isvc = load_inference_service(manifest)
        yield from build_children(isvc, Owner(isvc.api_version, isvc.kind, isvc.name, "uid"))


def _workload_class(child: dict[str, Any]) -> str:
    role = child["metadata"]["labels"]["app.kubernetes.io/component"]
    if role == "router":
        return "router"
    if child["kind"] != "Deployment":
        return role
    command = child["spec"]["template"]["spec"]["containers"][0]["command"]
    return "vllm-engine" if command[0] == "vllm" else "sim-engine"


@pytest.fixture(scope="module")
def scan(renders: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One checkov run over everything (its start-up dominates the cost)."""
    checkov = find_tool("checkov", CHECKOV_HINT)
    root = tmp_path_factory.mktemp("scan")
    (root / "chart").mkdir()
    for name, rendered in renders.items():
        (root / "chart" / f"{name}.yaml").write_text(yaml.safe_dump_all(rendered.docs))
    (root / "children").mkdir()
    classes: dict[str, str] = {}
    children = list(_children())
    for child in children:
        meta = child["metadata"]
        classes[f"{child['kind']}.{meta['namespace']}.{meta['name']}"] = _workload_class(child)
    (root / "children" / "children.yaml").write_text(yaml.safe_dump_all(children))
    for dockerfile in ("operator/Dockerfile", "engine_image/Dockerfile"):
        target = root / "docker" / Path(dockerfile).parent.name / "Dockerfile"
        target.parent.mkdir(parents=True)
        shutil.copy(REPO / dockerfile, target)
    out = subprocess.run(
        [checkov, "--directory", str(root), "--framework", "kubernetes", "dockerfile",
         "--output", "json", "--skip-download", "--compact"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    try:
        reports = json.loads(out.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov produced no report:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    reports = reports if isinstance(reports, list) else [reports]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for report in reports:
        results[report["check_type"]] = report["results"]
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
    return {"results": results, "classes": classes}


def _in(results: list[dict[str, Any]], folder: str) -> list[dict[str, Any]]:
    return [r for r in results if r["file_path"].startswith(f"/{folder}/")]


def test_scanner_saw_every_workload(scan: dict[str, Any]) -> None:
    passed = scan["results"]["kubernetes"]["passed_checks"]
    resources = {r["resource"] for r in passed}
    assert any(r.startswith("Deployment.tandem-system.tandem-operator") for r in resources)
    assert any(r.endswith("-router") and r.startswith("Deployment.") for r in resources)
    assert {"router", "vllm-engine", "sim-engine"} <= set(scan["classes"].values())


def test_chart_has_no_failed_checks(scan: dict[str, Any]) -> None:
    failed = _in(scan["results"]["kubernetes"]["failed_checks"], "chart")
    assert failed == [], [(f["check_id"], f["resource"], f["check_name"]) for f in failed]


def test_chart_suppressions_are_justified(scan: dict[str, Any]) -> None:
    skipped = _in(scan["results"]["kubernetes"]["skipped_checks"], "chart")
    assert skipped, "expected the documented suppressions to be reported as skipped"
    for check in skipped:
        reason = (check.get("check_result") or {}).get("suppress_comment") or ""
        assert len(reason) > 20, (check["check_id"], check["resource"], reason)
    ids = {c["check_id"] for c in skipped}
    assert ids == {"CKV_K8S_15", "CKV_K8S_38", "CKV_K8S_43"}, ids
    documented = (REPO / "docs" / "chart.md").read_text()
    for check_id in ids:
        assert check_id in documented, f"docs/chart.md does not explain {check_id}"


def test_children_fail_only_justified_checks(scan: dict[str, Any]) -> None:
    unexplained = []
    for check in _in(scan["results"]["kubernetes"]["failed_checks"], "children"):
        key = (check["check_id"], scan["classes"].get(check["resource"], "?"))
        if key not in BUILDER_SKIPS:
            unexplained.append((*key, check["resource"], check["check_name"]))
    assert unexplained == [], unexplained


def test_every_builder_suppression_is_still_needed(scan: dict[str, Any]) -> None:
    used = {
        (c["check_id"], scan["classes"].get(c["resource"], "?"))
        for c in _in(scan["results"]["kubernetes"]["failed_checks"], "children")
    }
    stale = set(BUILDER_SKIPS) - used
    assert stale == set(), f"remove suppressions the builders no longer need: {stale}"


def test_dockerfiles_have_no_failed_checks(scan: dict[str, Any]) -> None:
    results = scan["results"]["dockerfile"]
    assert results["failed_checks"] == [], [
        (f["check_id"], f["file_path"], f["check_name"]) for f in results["failed_checks"]
    ]
    assert {p["file_path"] for p in results["passed_checks"]} == {
        "/docker/operator/Dockerfile",
        "/docker/engine_image/Dockerfile",
    }
    for check in results["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment") or ""
        assert len(reason) > 20, (check["check_id"], check["file_path"], reason)
