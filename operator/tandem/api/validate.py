"""Manifest → :class:`InferenceService`, or every problem with its field path. Pure.

Two passes, both reported together: the schema (types, enums, bounds, unknown fields,
durations; what the CRD's OpenAPI schema also enforces) and the semantic rules of
:mod:`tandem.api.rules`. Messages say what was given and what would be valid::

    spec.prefill.replicas: min (4) must be <= max (2)
    spec.engine.extraArgs[0]: --max-num-seqs is set by Tandem; use spec.<pool>.maxNumSeqs instead
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ValidationError

from tandem.api import InferenceService
from tandem.api.rules import Problem, check_spec

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
    """Parse and check ``obj``; raise :class:`SpecError` listing every problem."""
    if not isinstance(obj, dict):
        raise SpecError([Problem("(document)", f"expected a mapping, got {type(obj).__name__}")])
    try:
        isvc = InferenceService.model_validate(obj)
    except ValidationError as err:
        raise SpecError([_problem(e) for e in err.errors(include_url=False)]) from None
    problems = check_spec(isvc.spec, vllm_serve_flags())
    if problems:
        raise SpecError(problems)
    return isvc


def _problem(error: Any) -> Problem:
    loc = [part for part in error["loc"] if _is_field(part)]
    path = _format_path(loc)
    kind, given = error["type"], error.get("input")
    if kind == "extra_forbidden":
        valid = ", ".join(_fields_at(loc[:-1])) or "(none)"
        return Problem(path, f"unknown field; valid fields here: {valid}")
    if kind == "missing":
        return Problem(path, "required field is missing")
    if kind == "value_error":  # our own validators already quote what was given
        return Problem(path, str(error["msg"]).removeprefix("Value error, "))
    return Problem(path, f"{error['msg']} (given: {_short(given)})")


def _is_field(part: Any) -> bool:
    # pydantic adds union member tags such as "str" or "function-after[...]" to locations.
    return isinstance(part, int) or (
        isinstance(part, str) and part.replace("_", "").isalnum() and part not in _TAGS
    )


_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _format_path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _fields_at(loc: list[Any]) -> list[str]:
    model: type[BaseModel] | None = InferenceService
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        model = _child_model(model, part)
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
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
