"""Pure pieces of the emulated Kubernetes API: selectors, patches, Status bodies, names.

No I/O. Each function follows what the Kubernetes API documents:

* label selectors: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/
  (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``);
* field selectors: only ``metadata.name`` and ``metadata.namespace`` (what every resource
  supports); anything else is a 400, as the API server answers for unsupported fields;
* JSON merge patch (RFC 7386) and JSON patch (RFC 6902) — the two patch types the
  emulator accepts;
* ``Status`` error bodies: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import random
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch

Labels = Mapping[str, str]
Matcher = Callable[[Labels], bool]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

#: The alphabet Kubernetes uses for generateName suffixes (no vowels, no look-alikes).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ApiError(Exception):
    """An error the emulated API answers with a ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_name(prefix: str, rng: random.Random) -> str:
    """``prefix`` plus five random characters, as the API server does for generateName."""
    return prefix + "".join(rng.choice(_NAME_ALPHABET) for _ in range(5))


_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<value>\(.*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


@dataclasses.dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: str  # in, notin, exists, absent ("=" is "in" one value, "!=" is "notin")
    values: frozenset[str] = frozenset()

    def __call__(self, labels: Labels) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "absent":
            return self.key not in labels
        return (labels.get(self.key) in self.values) == (self.op == "in")


@dataclasses.dataclass(frozen=True)
class _Selector:
    requirements: tuple[Callable[[Any], bool], ...]

    def __call__(self, subject: Any) -> bool:
        return all(check(subject) for check in self.requirements)


def parse_label_selector(text: str | None) -> Matcher:
    """A predicate over labels for a ``labelSelector`` string; ApiError 400 when malformed."""
    checks: list[Callable[[Any], bool]] = []
    for part in _split_top_level(text or ""):
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
        key, op, neg = match["key"], (match["op"] or "").strip(), bool(match["neg"])
        raw = match["value"] or ""
        if neg and op:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
        if op in ("in", "notin"):
            if not (raw.startswith("(") and raw.endswith(")")):
                raise ApiError(400, "BadRequest", f"set requirement needs (values): {part!r}")
            values = frozenset(v.strip() for v in raw[1:-1].split(",") if v.strip())
            checks.append(_LabelRequirement(key, op, values))
        elif op in ("=", "==", "!="):
            checks.append(_LabelRequirement(key, "notin" if op == "!=" else "in", frozenset({raw})))
        else:
            checks.append(_LabelRequirement(key, "absent" if neg else "exists"))
    return _Selector(tuple(checks))


@dataclasses.dataclass(frozen=True)
class _FieldRequirement:
    attr: str
    value: str
    negate: bool

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        found: object = (obj.get("metadata") or {}).get(self.attr)
        return (found == self.value) != self.negate


def parse_field_selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over an object for ``fieldSelector`` on metadata.name/namespace."""
    checks: list[Callable[[Any], bool]] = []
    for part in _split_top_level(text or ""):
        for op in ("!=", "==", "="):
            if op in part:
                field, value = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        if field not in ("metadata.name", "metadata.namespace"):
            raise ApiError(400, "BadRequest", f'field label not supported: "{field}"')
        checks.append(_FieldRequirement(field.split(".", 1)[1], value, op == "!="))
    return _Selector(tuple(checks))


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector object as the string form the ``scale`` subresource reports."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_patch(obj: dict[str, Any], body: Any, content_type: str) -> dict[str, Any]:
    """``obj`` with the PATCH ``body`` applied; ApiError for unsupported or broken patches."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == MERGE_PATCH:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "merge patch body must be a JSON object")
        patched = merge_patch(obj, body)
        assert isinstance(patched, dict)
        return patched
    if kind == JSON_PATCH:
        if not isinstance(body, list):
            raise ApiError(400, "BadRequest", "json patch body must be a JSON array")
        try:
            result = jsonpatch.apply_patch(copy.deepcopy(obj), body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
            raise ApiError(422, "Invalid", f"the server rejected our request: {err}") from None
        if not isinstance(result, dict):
            raise ApiError(422, "Invalid", "json patch must leave an object")
        return result
    if kind in (STRATEGIC_PATCH, APPLY_PATCH):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"{kind} is not emulated (strategic merge and server-side apply need the "
            "type schemas); use application/merge-patch+json or application/json-patch+json",
        )
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown "
        f"format - accepted media types include: {MERGE_PATCH}, {JSON_PATCH}",
    )


def random_suffix(rng: random.Random, length: int = 8) -> str:
    return "".join(rng.choice(string.hexdigits.lower()) for _ in range(length))
