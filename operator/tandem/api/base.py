"""Shared pieces of the API models: the strict base class, quantities, free-form objects. Pure.

Every model forbids unknown fields and is addressed by its camelCase alias, as Kubernetes
users write it. ``x-kubernetes-validations`` (CEL) rules are attached to a model with
:func:`cel`, so the CRD generator finds them in the JSON schema.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from tandem.api.limits import (
    FREEFORM_MAX_BYTES,
    FREEFORM_MAX_DEPTH,
    FREEFORM_MAX_PROPERTIES,
    compute_depth,
    compute_json_size,
    iter_non_json,
)

#: Validation context of a manifest read from a user or the API server (what the CRD
#: sees: JSON values, no Python conveniences such as numbers for durations).
MANIFEST_CONTEXT = {"manifest": True}

_SUFFIX = r"(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][0-9]+)?"
#: A Kubernetes resource quantity (``500m``, ``8``, ``64Gi``), checked by the CRD pattern.
QUANTITY_PATTERN = rf"^([0-9]+(\.[0-9]+)?|\.[0-9]+){_SUFFIX}$"
#: A quantity that is not zero: its number has a non-zero digit.
POSITIVE_QUANTITY_PATTERN = rf"^([0-9]*[1-9][0-9]*(\.[0-9]+)?|[0-9]*\.[0-9]*[1-9][0-9]*){_SUFFIX}$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
_POSITIVE = re.compile(POSITIVE_QUANTITY_PATTERN)


def is_manifest(info: ValidationInfo | None) -> bool:
    """Whether this validation reads a manifest (:data:`MANIFEST_CONTEXT`)."""
    context = None if info is None else info.context
    return isinstance(context, dict) and bool(context.get("manifest"))


def parse_quantity(value: Any, *, manifest: bool = False) -> str:
    """A resource quantity as the string Kubernetes would print back (``8`` -> ``"8"``).

    In a manifest only strings and integers are quantities (the CRD's int-or-string)."""
    wrong_type = isinstance(value, bool) or not isinstance(value, str | int | float)
    if wrong_type or (isinstance(value, float) and manifest):
        raise ValueError(
            f"expected a quantity such as '500m', '8' or '64Gi' (a string or an integer), "
            f"got {value!r}"
        )
    text = str(value)
    if not _QUANTITY.fullmatch(text):
        raise ValueError(
            f"invalid quantity {text[:40]!r}: use a number with an optional suffix "
            "(m, k, M, G, Ki, Mi, Gi, ...), e.g. '500m', '8', '64Gi'"
        )
    return text


def _validate_quantity(value: Any, info: ValidationInfo) -> str:
    return parse_quantity(value, manifest=is_manifest(info))


def parse_positive_quantity(value: Any, *, manifest: bool = False) -> str:
    """A quantity that is more than zero (memory, ``/dev/shm``)."""
    text = parse_quantity(value, manifest=manifest)
    if not _POSITIVE.fullmatch(text):
        raise ValueError(f"{text!r} is zero; give a size above zero, e.g. '512Mi' or '32Gi'")
    return text


def _validate_positive_quantity(value: Any, info: ValidationInfo) -> str:
    return parse_positive_quantity(value, manifest=is_manifest(info))


Quantity = Annotated[
    str,
    BeforeValidator(_validate_quantity),
    # The pattern binds strings only: a negative integer needs the minimum.
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "minimum": 0}),
]

PositiveQuantity = Annotated[
    str,
    BeforeValidator(_validate_positive_quantity),
    WithJsonSchema(
        {"x-kubernetes-int-or-string": True, "pattern": POSITIVE_QUANTITY_PATTERN, "minimum": 1}
    ),
]


class LimitError(ValueError):
    """A bound of :mod:`tandem.api.limits` the CRD cannot express was exceeded."""


def check_free_form(value: dict[str, Any]) -> dict[str, Any]:
    """A free-form object within :mod:`tandem.api.limits`: JSON only, bounded depth,
    keys and size; the error says which bound and what was found."""
    if len(value) > FREEFORM_MAX_PROPERTIES:
        # the CRD's maxProperties: a schema error, not a limit
        raise ValueError(f"{len(value)} keys; at most {FREEFORM_MAX_PROPERTIES} are allowed here")
    depth = compute_depth(value, FREEFORM_MAX_DEPTH)
    if depth > FREEFORM_MAX_DEPTH:
        raise LimitError(
            f"nested more than {FREEFORM_MAX_DEPTH} levels deep; at most "
            f"{FREEFORM_MAX_DEPTH} are allowed"
        )
    for where, why in iter_non_json(value, "(value)"):
        raise LimitError(f"{where}: {why}")
    size = compute_json_size(value)
    if size > FREEFORM_MAX_BYTES:
        raise LimitError(
            f"{size} bytes as JSON; at most {FREEFORM_MAX_BYTES} bytes are allowed here"
        )
    return value


#: An object passed through verbatim (affinity, connector extra config), bounded.
FreeForm = Annotated[
    dict[str, Any],
    AfterValidator(check_free_form),
    WithJsonSchema(
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "maxProperties": FREEFORM_MAX_PROPERTIES,
        }
    ),
]

#: Opaque state the operator keeps in ``status`` (never read from users).
OpaqueState = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

#: A DNS-1123 label: names of Kubernetes objects Tandem derives from this value.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Model(BaseModel):
    """Base of every API model: camelCase aliases, unknown fields rejected, frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
        # JSON has no infinities (a YAML .inf would reach no API server).
        allow_inf_nan=False,
    )


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` holding CEL rules as (expression, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}
