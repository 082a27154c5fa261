"""The CRD is generated, up to date, structural, and accepts every example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tandem.api.crd import build_crd, build_openapi_schema
from tandem.commands.crd import CRD_FILE, render_crd_yaml

K8S_VERSION = "1.30.0"


def _walk(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def test_committed_crd_is_up_to_date(repo_root: Path) -> None:
    committed = (repo_root / "crds" / CRD_FILE).read_text()
    assert committed == render_crd_yaml(), "crds/ is out of date: run `tandem crd`"


def test_crd_validates_as_apiextensions_v1() -> None:
    kubernetes_validate.validate(build_crd(), K8S_VERSION, strict=True)


def test_schema_is_structural() -> None:
    schema = build_openapi_schema()
    for path, node in _walk(schema):
        if path.endswith(".properties") or path.endswith("x-kubernetes-validations"):
            continue
        assert "$ref" not in node and "anyOf" not in node and "allOf" not in node, path
        assert "title" not in node, path
        if "properties" in node or "items" in node:
            assert node.get("type") in ("object", "array"), path
        if node.get("additionalProperties") is False:
            pytest.fail(f"{path}: additionalProperties false is not allowed in a CRD")


def test_every_leaf_has_a_type() -> None:
    for path, node in _walk(build_openapi_schema()):
        if path.endswith(".properties") or "rule" in node or path.endswith("default"):
            continue
        if path.split(".")[-2:-1] == ["properties"]:
            assert (
                "type" in node
                or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")
            ), path


def test_cel_rules_cover_cross_field_constraints() -> None:
    rules = [n["rule"] for _, n in _walk(build_openapi_schema()) if "rule" in n]
    assert any("self.min <= self.max" in r for r in rules)
    assert any("tensorParallelSize == 0" in r for r in rules)
    assert any("self.mode == 'aggregated'" in r for r in rules)
    assert any("self.initial" in r for r in rules)


def test_defaults_are_written_like_the_models_write_them() -> None:
    spec = build_openapi_schema()["properties"]["spec"]["properties"]
    assert spec["engine"]["properties"]["shutdownTimeout"]["default"] == "30s"
    assert spec["autoscaling"]["properties"]["interval"]["default"] == "15s"
    assert spec["mode"]["default"] == "disaggregated"


def test_printer_columns_and_short_name() -> None:
    version = build_crd()["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:2] == ["Mode", "Ready"] and "URL" in names and names[-1] == "Age"
    assert version["subresources"] == {"status": {}}
    assert "isvc" not in build_crd()["spec"]["names"]["shortNames"]


def _examples(repo_root: Path) -> list[Path]:
    found = sorted((repo_root / "examples").glob("*.yaml"))
    assert len(found) >= 5
    return found


def test_every_example_validates_against_the_crd_schema(repo_root: Path) -> None:
    validator = jsonschema.Draft4Validator(build_openapi_schema(strict=True))
    for path in _examples(repo_root):
        for doc in yaml.safe_load_all(path.read_text()):
            errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
            assert not errors, f"{path.name}: {errors}"


def test_crd_schema_rejects_what_the_models_reject() -> None:
    validator = jsonschema.Draft4Validator(build_openapi_schema(strict=True))
    base = yaml.safe_load(
        "apiVersion: serving.tandem.dev/v1alpha1\nkind: InferenceService\nmetadata: {name: a}\n"
        "spec: {model: {name: m, uri: 'hf://o/n'}}\n"
    )
    assert not list(validator.iter_errors(base))
    for bad_spec in (
        {"model": {"name": "m", "uri": "http://nope"}},
        {"model": {"name": "m", "uri": "hf://o/n"}, "mode": "both"},
        {"model": {"name": "m", "uri": "hf://o/n"}, "surprise": 1},
        {"model": {"name": "m", "uri": "hf://o/n"}, "autoscaling": {"interval": "15 seconds"}},
        {"model": {"name": "m", "uri": "hf://o/n"}, "prefill": {"replicas": {"min": -1}}},
    ):
        assert list(validator.iter_errors({**base, "spec": bad_spec})), bad_spec
