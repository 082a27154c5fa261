"""Generate the ``InferenceService`` CRD from the pydantic models. Pure.

The schema is built by walking the models: nested models become structural ``object``
nodes with their CEL rules, leaves take pydantic's own JSON schema of the field (so
enums, bounds and patterns come from one place) rewritten into the OpenAPI v3.0 subset
Kubernetes accepts (no ``$ref``, ``anyOf`` with null, ``title`` or 2020-12 exclusive bounds).
Defaults are serialized the way the models write them (``30s``, not ``30.0``), so the API
server's defaulting and pydantic's agree.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from tandem.api import (
    API_VERSION,
    GROUP,
    KIND,
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    InferenceServiceSpec,
    InferenceServiceStatus,
)
from tandem.api.durations import DURATION_PATTERN, FINE_DURATION_PATTERN

_DROP = {"title", "gt", "ge", "lt", "le"}


def build_crd() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition as a dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "tandem", "app.kubernetes.io/part-of": "tandem"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["tandem"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {"openAPIV3Schema": build_openapi_schema()},
                }
            ],
        },
    }


def build_openapi_schema(*, strict: bool = False) -> dict[str, Any]:
    """The resource's ``openAPIV3Schema``.

    ``strict=True`` adds ``additionalProperties: false`` to every modelled object: what
    the API server does with unknown fields under ``kubectl``'s default strict field
    validation, for checking manifests with a plain JSON-schema validator.
    """
    return {
        "type": "object",
        "description": f"{KIND} ({API_VERSION}): an LLM service with prefill and decode "
        "pools and a router, sized by Tandem's autoscaler.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # The API server allows restrictions on metadata.name (and generateName) only.
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": NAME_PATTERN,
                        "maxLength": NAME_MAX_LENGTH,
                    }
                },
            },
            "spec": _model_schema(InferenceServiceSpec, strict),
            "status": _model_schema(InferenceServiceStatus, strict),
        },
    }


def _printer_columns() -> list[dict[str, Any]]:
    def col(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
        if priority:
            out["priority"] = priority
        return out

    return [
        col("Mode", ".spec.mode"),
        col("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        col("Prefill", ".status.pools.prefill.readyReplicas", "integer"),
        col("Prefill-Desired", ".status.pools.prefill.desiredReplicas", "integer"),
        col("Decode", ".status.pools.decode.readyReplicas", "integer"),
        col("Decode-Desired", ".status.pools.decode.desiredReplicas", "integer"),
        col("Pool", ".status.pools.pool.readyReplicas", "integer", priority=1),
        col("URL", ".status.routerURL"),
        col("Age", ".metadata.creationTimestamp", "date"),
    ]


def _model_schema(model: type[BaseModel], strict: bool) -> dict[str, Any]:
    extra = model.model_config.get("json_schema_extra")
    node: dict[str, Any] = {"type": "object"}
    if model.__doc__:
        node["description"] = model.__doc__.strip().splitlines()[0]
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        props[key] = _field_schema(field, strict)
        if field.is_required():
            required.append(key)
    node["properties"] = props
    if required:
        node["required"] = required
    if isinstance(extra, dict):
        node.update({k: v for k, v in extra.items() if k != "title"})
    if model.model_config.get("extra") == "allow":
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif strict:
        node["additionalProperties"] = False
    return node


def _field_schema(field: FieldInfo, strict: bool) -> dict[str, Any]:
    node = _type_schema(field.annotation, field.metadata, strict)
    if node.get("pattern") in (DURATION_PATTERN, FINE_DURATION_PATTERN):
        rules = _duration_rules(field.metadata)
        if rules:
            node["x-kubernetes-validations"] = rules
    if field.description:
        node["description"] = field.description
    default = _default_of(field)
    if default is not None:
        node["default"] = default
    return node


def _type_schema(annotation: Any, metadata: list[Any], strict: bool) -> dict[str, Any]:
    inner = _strip_none(annotation)
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return _model_schema(inner, strict)
    origin, args = get_origin(inner), get_args(inner)
    if origin is list and _is_model(args[0]):
        node = {"type": "array", "items": _model_schema(args[0], strict)}
        return node | _leaf(list[int], metadata)  # carries maxItems/minItems
    if origin is dict and len(args) == 2 and _is_model(args[1]):
        return {"type": "object", "additionalProperties": _model_schema(args[1], strict)}
    return _leaf(inner, metadata)


def _leaf(annotation: Any, metadata: list[Any]) -> dict[str, Any]:
    schema = TypeAdapter(Annotated[annotation, *metadata] if metadata else annotation)
    node: dict[str, Any] = _clean(schema.json_schema(mode="validation"))
    if get_origin(annotation) is list and node.get("items", {}).get("type") == "integer":
        del node["items"]  # only the size bounds were wanted
    return node


def _clean(node: Any) -> Any:
    if isinstance(node, list):
        return [_clean(x) for x in node]
    if not isinstance(node, dict):
        return node
    any_of = node.get("anyOf")
    if isinstance(any_of, list):
        kept = [x for x in any_of if x != {"type": "null"}]
        if len(kept) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"} | kept[0]
            return _clean(merged)
    out = {k: _clean(v) for k, v in node.items() if k not in _DROP}
    for bound, name in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
            out[name], out[bound] = out[bound], True
    if out.get("type") == "string" and "x-kubernetes-int-or-string" in out:
        del out["type"]
    if out.get("default") is None:
        out.pop("default", None)
    return out


def _duration_rules(metadata: list[Any]) -> list[dict[str, str]]:
    """CEL for a duration's bounds: OpenAPI bounds apply to numbers, and a duration is a
    string, so the API server checks them with CEL's ``duration()``."""
    rules: list[dict[str, str]] = []
    ops = (("gt", ">", "more than"), ("ge", ">=", "at least"), ("lt", "<", "less than"),
           ("le", "<=", "at most"))  # fmt: skip
    for item in metadata:
        for attr, op, words in ops:
            bound = getattr(item, attr, None)
            if isinstance(item, annotated_types.BaseMetadata) and bound is not None:
                go = f"{bound:g}s"
                rules.append(
                    {
                        "rule": f"duration(self) {op} duration('{go}')",
                        "message": f"must be {words} {go}",
                    }
                )
    return rules


def _default_of(field: FieldInfo) -> Any:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.is_required() or field.default is None:
        return None
    else:
        value = field.default
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[annotation, *field.metadata]
    adapter = TypeAdapter(annotation)
    if not isinstance(value, BaseModel):
        value = adapter.validate_python(value)  # "30s" -> 30.0, written back as "30s"
    return adapter.dump_python(value, mode="json", by_alias=True, exclude_none=True)


def _strip_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
