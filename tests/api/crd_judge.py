"""The CRD's OpenAPI schema as the API server applies it, for tests: a second opinion on
a manifest that shares no code with ``tandem validate`` but the generated schema.

What the API server does before and while validating a custom resource, reproduced:
the manifest must be JSON (kubectl sends JSON; a YAML ``.inf`` or date never arrives as
such); nulls of modelled fields are pruned; a whole number (``8.0``) is an integer;
unknown fields are errors (kubectl's strict field validation);
``x-kubernetes-int-or-string`` means an integer or a string; and a pattern's ``$``
matches only at the end, as in Go's RE2 (Python's ``re`` also matches before a final
newline). CEL rules are not evaluated here: the real API server judges those
(``e2e/test_policy.py``).
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema

from tandem.api.crd import build_openapi_schema


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if isinstance(instance, str) and not re.search(pattern.removesuffix("$") + r"\Z", instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _adapt(node: Any) -> Any:
    if isinstance(node, list):
        return [_adapt(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _adapt(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if out.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    return out


def _is_integer(checker: Any, instance: Any) -> bool:
    # The API server reads 8.0 as the integer 8 (JSON Schema draft 6 and later agree).
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())


_Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    {"pattern": _go_pattern},
    type_checker=jsonschema.Draft4Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@cache
def _schema() -> dict[str, Any]:
    return build_openapi_schema(strict=True)


@cache
def _validator() -> Any:
    return _Validator(_adapt(_schema()))


def _prune(value: Any, schema: dict[str, Any] | None) -> Any:
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if child is None and sub is not None:
                continue
            out[key] = _prune(child, sub)
        return out
    if isinstance(value, list):
        return [_prune(item, schema.get("items")) for item in value]
    return value


def crd_errors(manifest: Any) -> list[str]:
    """Why the CRD's schema rejects ``manifest`` (empty: accepted)."""
    try:
        wire = json.loads(json.dumps(manifest, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as err:
        return [f"not JSON: {err}"]
    meta = wire.get("metadata") if isinstance(wire, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return ["metadata.name: the API server requires a name"]
    pruned = _prune(wire, _schema())
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message[:120]}"
        for e in _validator().iter_errors(pruned)
    ]
