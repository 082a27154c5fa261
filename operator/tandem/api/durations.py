"""Kubernetes-style durations (``800ms``, ``5s``, ``1m30s``) as float seconds. Pure.

The API stores every duration as seconds (``float``) and writes it back in the shortest
string form, so ``"1500ms"`` reads as ``1.5`` and is shown as ``"1.5s"``. In a manifest a
duration is a string with a unit, as the CRD requires (``interval: 15`` is rejected with
the fix, ``'15s'``); Python callers may pass seconds as numbers.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, cast

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo, WithJsonSchema

from tandem.api.base import is_manifest

_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
#: The pattern the CRD enforces; it matches what :func:`parse_duration` accepts as a string.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: Longest duration string (the CRD's ``maxLength``): ``1h30m15s500ms`` is 13.
DURATION_MAX_LENGTH = 32


def parse_duration(value: Any, *, manifest: bool = False) -> float:
    """Return ``value`` in seconds; raise ``ValueError`` naming the accepted forms.
    ``manifest``: numbers are refused (the CRD takes strings only).

    >>> parse_duration("1m30s"), parse_duration("800ms"), parse_duration(2)
    (90.0, 0.8, 2.0)
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '800ms', '5s' or '5m', not a boolean")
    if isinstance(value, int | float):
        if manifest:
            raise ValueError(
                f"a duration is a string with a unit: write '{value:g}s' for {value:g} "
                "seconds (or '800ms', '5m', '1m30s')"
            )
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"duration must be a finite number of seconds >= 0, got {value}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as '800ms', '5s' or '5m', got {value!r}")
    if len(value) > DURATION_MAX_LENGTH:
        raise ValueError(
            f"duration is {len(value)} characters long; at most {DURATION_MAX_LENGTH} "
            "(e.g. '1h30m')"
        )
    text = value
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(
            f"invalid duration {value!r}: use a number with a unit ms, s, m or h "
            "(e.g. '800ms', '5s', '5m', '1m30s')"
        )
    return total


def default_duration(text: str) -> float:
    """A field's default written as a manifest writes it (``"30s"``). The models validate
    defaults, so the stored value is seconds; a manifest's defaults and the CRD's match.
    Typed as the field is; a typo fails at import."""
    parse_duration(text)
    return cast(float, text)


def _validate_duration(value: Any, info: ValidationInfo) -> float:
    return parse_duration(value, manifest=is_manifest(info))


def format_duration(seconds: float) -> str:
    """The shortest exact string for ``seconds``: ``0.8 -> '800ms'``, ``90 -> '90s'``."""
    if seconds < 1 and seconds != 0:
        return f"{_num(seconds * 1000)}ms"
    if seconds >= 60 and seconds % 60 == 0:
        minutes = seconds / 60
        return f"{_num(minutes / 60)}h" if minutes % 60 == 0 else f"{_num(minutes)}m"
    return f"{_num(seconds)}s"


def _num(value: float) -> str:
    """``value`` without float noise or trailing zeros (nanosecond resolution)."""
    return f"{value:.9f}".rstrip("0").rstrip(".")


Duration = Annotated[
    float,
    BeforeValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH}
    ),
]
"""A duration field: validated from ``'800ms'``-style strings, stored as seconds."""
