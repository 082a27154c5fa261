"""Shared pieces of the API models: the strict base class, quantities, free-form objects. Pure.

Every model forbids unknown fields and is addressed by its camelCase alias, as Kubernetes
users write it. ``x-kubernetes-validations`` (CEL) rules are attached to a model with
:func:`cel`, so the CRD generator finds them in the JSON schema.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

#: A Kubernetes resource quantity (``500m``, ``8``, ``64Gi``), checked by the CRD pattern.
QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][0-9]+)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)


def parse_quantity(value: Any) -> str:
    """A resource quantity as the string Kubernetes would print back (``8`` -> ``"8"``)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a quantity such as '500m', '8' or '64Gi', got {value!r}")
    text = str(value)
    if not _QUANTITY.match(text):
        raise ValueError(
            f"invalid quantity {text!r}: use a number with an optional suffix "
            "(m, k, M, G, Ki, Mi, Gi, ...), e.g. '500m', '8', '64Gi'"
        )
    return text


Quantity = Annotated[
    str,
    BeforeValidator(parse_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
]

#: An object passed through verbatim (affinity, connector extra config).
FreeForm = Annotated[
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
    )


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` holding CEL rules as (expression, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}
