"""Manifest → :class:`InferenceService`, or every problem with its field path. Pure.

Two passes, both reported together: the schema (types, enums, bounds, unknown fields,
durations; what the CRD's OpenAPI schema also enforces) and the semantic rules of
:mod:`tandem.api.rules`. Messages say what was given and what would be valid::

    spec.prefill.replicas: min (4) must be <= max (2)
    spec.engine.extraArgs[0]: --max-num-seqs is set by Tandem; use spec.<pool>.maxNumSeqs instead
"""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ValidationError

from tandem.api import NAME_PATTERN, InferenceService
from tandem.api.base import DNS_LABEL_PATTERN, MANIFEST_CONTEXT, LimitError
from tandem.api.crd import build_openapi_schema
from tandem.api.durations import DURATION_PATTERN, format_duration
from tandem.api.limits import (
    MANIFEST_MAX_DEPTH,
    SPEC_MAX_BYTES,
    compute_depth,
    compute_json_size,
    iter_non_json,
)
from tandem.api.rules import Problem, check_spec
from tandem.api.spec import EXTENDED_RESOURCE_PATTERN, MODEL_URI_PATTERN

#: What each pattern of the API means, for people: a pattern error says this instead.
PATTERN_HELP: dict[str, str] = {
    NAME_PATTERN: "a lowercase DNS-1035 label: a letter first, then letters, digits and "
    "'-', ending with a letter or digit (it names the router's Service), e.g. 'chat'",
    DNS_LABEL_PATTERN: "a lowercase DNS label: letters, digits and '-', starting and ending "
    "with a letter or digit, e.g. 'team-a'",
    MODEL_URI_PATTERN: "hf://org/name[@revision], pvc://claim/path, s3://bucket/path or "
    "file:///abs/path (tandem up only), without '.' or '..' path segments or spaces",
    EXTENDED_RESOURCE_PATTERN: "a domain-qualified extended resource such as "
    "'nvidia.com/gpu' or 'amd.com/gpu' (cpu and memory are set by cpu/memory)",
    r"^[A-Za-z0-9][-A-Za-z0-9_.:/]*$": "letters, digits and '-_.:/', starting with a "
    "letter or digit, e.g. 'llama-3.1-8b'",
    r"^[a-z0-9][-a-z0-9.]*$": "lowercase letters, digits, '-' and '.', e.g. 'llama-3.1-8b'",
    r"^[A-Za-z0-9-]+$": "an HTTP header name: letters, digits and '-'",
    r"^https?://[^\t\n\f\r ]+$": "an http:// or https:// URL without spaces",
    r"^[^\t\n\f\r ]+$": "an image reference without spaces, e.g. 'vllm/vllm-openai:v0.34.0'",
    r"^[-._a-zA-Z0-9]+$": "a Secret key: letters, digits, '-', '_' and '.'",
}
_BOUND_WORDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}

#: vLLM version whose ``vllm serve`` flags the builders emit and extraArgs are checked against.
VLLM_VERSION = "0.34.0"


class SpecError(ValueError):
    """A manifest that is not a valid InferenceService; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@cache
def vllm_serve_flags(version: str = VLLM_VERSION) -> frozenset[str]:
    """Every flag of ``vllm serve`` at ``version`` (the list vLLM's own parser builds)."""
    data = resources.files("tandem.api").joinpath(f"data/serve_flags-{version}.json")
    return frozenset(json.loads(data.read_text()))


def validate_manifest(obj: Any) -> list[Problem]:
    """Every problem of ``obj`` as an InferenceService manifest; empty when valid."""
    try:
        load_inference_service(obj)
    except SpecError as err:
        return err.problems
    return []


def load_inference_service(obj: Any) -> InferenceService:
    """Parse and check ``obj``; raise :class:`SpecError` listing every problem.

    ``obj`` is a manifest as the API server would hold it: JSON values only, durations as
    strings, integers as integers (``"8"`` is not one) — what the CRD accepts."""
    if not isinstance(obj, dict):
        raise SpecError([Problem("(document)", f"expected a mapping, got {type(obj).__name__}")])
    if compute_depth(obj, MANIFEST_MAX_DEPTH) > MANIFEST_MAX_DEPTH:
        raise SpecError(
            [Problem("(document)", f"nested more than {MANIFEST_MAX_DEPTH} levels deep", "limit")]
        )
    odd = [(path, why) for path, why in iter_non_json(obj, "(document)")][:20]
    if odd:
        raise SpecError([Problem(p.removeprefix("(document)."), why, "schema") for p, why in odd])
    obj = prune_nulls(obj)
    try:
        isvc = InferenceService.model_validate(obj, strict=True, context=MANIFEST_CONTEXT)
    except ValidationError as err:
        raise SpecError([_problem(e) for e in err.errors(include_url=False)]) from None
    problems = check_spec(isvc.spec, vllm_serve_flags())
    size = compute_json_size(obj.get("spec"))
    if size > SPEC_MAX_BYTES:
        problems.append(
            Problem(
                "spec",
                f"{size} bytes as JSON; at most {SPEC_MAX_BYTES} bytes (every child's "
                "last-applied record must stay within the API server's 256 KiB for "
                "annotations)",
                "limit",
            )
        )
    if problems:
        raise SpecError(problems)
    return isvc


def prune_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server validates it: without the ``null`` values it drops (those
    of modelled fields; a null with a default gets the default, so it does here), and
    with whole numbers such as ``8.0`` read as the integers the server takes them for.
    Free-form values are kept as they are, as the server keeps them."""
    return dict(_prune(obj, _schema()))


@cache
def _schema() -> dict[str, Any]:
    return build_openapi_schema()


def _prune(
    value: Any, schema: dict[str, Any] | None, read_by_cel: frozenset[str] = frozenset()
) -> Any:
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        names = read_by_cel | _cel_names(schema)
        out = {}
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if child is None and sub is not None:
                continue
            if isinstance(child, float) and key in names:
                out[key] = child  # a CEL rule reads it: the server refuses a float here
            else:
                out[key] = _prune(child, sub, names)
        return out
    if isinstance(value, list):
        return [_prune(item, schema.get("items"), read_by_cel) for item in value]
    integer = schema.get("type") == "integer" or schema.get("x-kubernetes-int-or-string")
    if integer and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _cel_names(schema: dict[str, Any]) -> frozenset[str]:
    """Field names the CEL rules of ``schema`` read (``c.priority``, ``self.min``). The
    API server takes ``8.0`` for an integer, except where a rule reads it (its CEL
    evaluation fails on a float): there validate keeps it a float, and refuses it."""
    rules = " ".join(r.get("rule", "") for r in schema.get("x-kubernetes-validations") or [])
    return frozenset(re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)", rules))


def _problem(error: Any) -> Problem:
    kind, given = error["type"], error.get("input")
    raw = list(error["loc"])
    loc = [part for part in raw if _is_field(part)]
    if kind == "extra_forbidden" and raw and (not loc or loc[-1] is not raw[-1]):
        loc.append(raw[-1])  # the unknown key itself, whatever it is spelled like
    path = _format_path(loc)
    if kind == "extra_forbidden":
        fields = _fields_at(loc[:-1])
        valid = ", ".join(fields) or "(none)"
        hint = _did_you_mean(str(loc[-1]) if loc else "", fields)
        return Problem(path, f"unknown field{hint}; valid fields here: {valid}", "schema")
    if kind == "missing":
        return Problem(path, "required field is missing", "schema")
    ctx = error.get("ctx") or {}
    if kind == "int_type" and isinstance(given, float) and given.is_integer():
        # The schema takes 8.0 for an integer; the CRD's CEL rules that read this field
        # do not (prune_nulls leaves such floats alone): a rule's problem, not the schema's.
        return Problem(path, f"write {int(given)}, not {given}: a rule reads this integer")
    if kind == "value_error":  # our own validators already quote what was given
        limit = isinstance(ctx.get("error"), LimitError)
        message = str(error["msg"]).removeprefix("Value error, ")
        return Problem(path, message, "limit" if limit else "schema")
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_HELP:
        help_ = PATTERN_HELP[ctx["pattern"]]
        return Problem(path, f"{_short(given)} is not valid; use {help_}", "schema")
    if kind in _BOUND_WORDS and _is_duration(loc) and isinstance(given, int | float):
        key, words = _BOUND_WORDS[kind]
        bound = format_duration(float(ctx[key]))
        # a duration is a string: its bounds are CEL rules on the CRD, not schema bounds
        return Problem(path, f"must be {words} {bound} (given: {format_duration(given)})")
    return Problem(path, f"{error['msg']} (given: {_short(given)})", "schema")


def _is_duration(loc: list[Any]) -> bool:
    """Whether the field at ``loc`` is a :data:`~tandem.api.durations.Duration`."""
    if not loc or isinstance(loc[-1], int):
        return False
    parent = _model_at(loc[:-1])
    if parent is None:
        return False
    for name, field in parent.model_fields.items():
        if loc[-1] in (name, field.alias):
            return any(
                getattr(m, "json_schema", {}).get("pattern") == DURATION_PATTERN
                for m in field.metadata
            )
    return False


def _did_you_mean(key: str, fields: list[str]) -> str:
    """``" (did you mean maxNumSeqs?)"`` for ``max-num-seqs``; empty when nothing is close."""

    def norm(text: str) -> str:
        return re.sub(r"[-_.\s]", "", text).lower()

    by_norm = {norm(f): f for f in fields}
    if norm(key) in by_norm:
        return f" (did you mean {by_norm[norm(key)]}?)"
    close = difflib.get_close_matches(norm(key), list(by_norm), n=1, cutoff=0.8)
    return f" (did you mean {by_norm[close[0]]}?)" if close else ""


def _is_field(part: Any) -> bool:
    # pydantic adds union member tags such as "str" or "function-after[...]" to locations.
    if isinstance(part, int):
        return True
    return isinstance(part, str) and part not in _TAGS and not _TAG.match(part)


_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "literal"})
_TAG = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\[.*\]$", re.DOTALL)
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _format_path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)) and len(str(part)) <= 64:
            out += f".{part}" if out else str(part)
        else:
            out += f"[{_short(str(part))}]"
    return out or "(document)"


def _model_at(loc: list[Any]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = InferenceService
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        model = _child_model(model, part)
    return model


def _fields_at(loc: list[Any]) -> list[str]:
    model = _model_at(loc)
    if model is None:
        return []
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _child_model(model: type[BaseModel], alias: str) -> type[BaseModel] | None:
    for name, field in model.model_fields.items():
        if alias in (name, field.alias):
            return _model_in(field.annotation)
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _short(value: Any) -> str:
    """At most 60 characters showing ``value``; never walks a deep value."""
    if isinstance(value, dict | list) and compute_depth(value, 8) > 8:
        return f"a deeply nested {type(value).__name__}"
    try:
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
