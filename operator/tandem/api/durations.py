"""Kubernetes-style durations (``800ms``, ``5s``, ``1m30s``) as float seconds. Pure.

The API stores every duration as seconds (``float``) and writes it back in the shortest
string form, so ``"1500ms"`` reads as ``1.5`` and is shown as ``"1.5s"``. In a manifest a
duration is a string with a unit, as the CRD requires (``interval: 15`` is rejected with
the fix, ``'15s'``); Python callers may pass seconds as numbers. A :data:`FineDuration`
(a time per token) also takes microseconds: ``50us``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, cast

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo, WithJsonSchema

from tandem.api.base import is_manifest

_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s|m|h)")
#: The pattern the CRD enforces; it matches what :func:`parse_duration` accepts as a string.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: The pattern of a :data:`FineDuration`, which also takes microseconds (``50us``).
FINE_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(us|ms|s|m|h))+$"
#: Longest duration string (the CRD's ``maxLength``): ``1h30m15s500ms`` is 13.
DURATION_MAX_LENGTH = 32


def parse_duration(value: Any, *, manifest: bool = False, fine: bool = False) -> float:
    """Return ``value`` in seconds; raise ``ValueError`` naming the accepted forms.
    ``manifest``: numbers are refused (the CRD takes strings only); ``fine``: microseconds
    (``us``) are accepted too.

    >>> parse_duration("1m30s"), parse_duration("800ms"), parse_duration(2)
    (90.0, 0.8, 2.0)
    >>> parse_duration("50us", fine=True)
    5e-05
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
        if match.start() != pos or (match.group(2) == "us" and not fine):
            break
        number, unit = float(match.group(1)), match.group(2)
        # 50 / 1e6 is exactly 5e-05 where 50 * 1e-6 is not
        total += number / 1e6 if unit == "us" else number * _UNIT_S[unit]
        pos = match.end()
    if pos != len(text) or not text:
        units, examples = (
            ("us, ms, s, m or h", "'50us', '0.2ms', '1s'")
            if fine
            else ("ms, s, m or h", "'800ms', '5s', '5m', '1m30s'")
        )
        raise ValueError(
            f"invalid duration {value!r}: use a number with a unit {units} (e.g. {examples})"
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


def _validate_fine_duration(value: Any, info: ValidationInfo) -> float:
    return parse_duration(value, manifest=is_manifest(info), fine=True)


def format_fine_duration(seconds: float) -> str:
    """Like :func:`format_duration`, in microseconds below a millisecond:
    ``5e-05 -> '50us'``."""
    if 0 < seconds < 1e-3:
        return f"{_num(seconds * 1e6)}us"
    return format_duration(seconds)


Duration = Annotated[
    float,
    BeforeValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH}
    ),
]
"""A duration field: validated from ``'800ms'``-style strings, stored as seconds."""

FineDuration = Annotated[
    float,
    BeforeValidator(_validate_fine_duration),
    PlainSerializer(format_fine_duration, return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": FINE_DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH}
    ),
]
"""A duration that may be as small as microseconds (``50us``), e.g. a time per token."""
