"""Reading request fields as vLLM's pydantic request models do (lax mode, JSON input). Pure.

vLLM accepts ``"max_tokens": "5"``, ``"stream": "true"`` and ``"n": 2.0`` (pydantic's lax
coercion) and rejects what pydantic would, with pydantic's error types and messages; the
helpers here do the same for the fields the simulated engine reads. Each raises the
request-model family of :mod:`tandem.engine.server.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.engine.server.errors import validation_error

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_int(value: Any, loc: str) -> int:
    """An integer, from an int, an integral float, a bool or a numeric string.

    >>> lax_int("5", "max_tokens"), lax_int(2.0, "n"), lax_int(True, "n")
    (5, 2, 1)
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        msg = "Input should be a valid integer, got a number with a fractional part"
        raise validation_error("int_from_float", loc, msg, value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            msg = "Input should be a valid integer, unable to parse string as an integer"
            raise validation_error("int_parsing", loc, msg, value) from None
    raise validation_error("int_type", loc, "Input should be a valid integer", value)


def lax_float(value: Any, loc: str) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            msg = "Input should be a valid number, unable to parse string as a number"
            raise validation_error("float_parsing", loc, msg, value) from None
    raise validation_error("float_type", loc, "Input should be a valid number", value)


def lax_bool(value: Any, loc: str) -> bool:
    """A boolean, from a bool, 0/1 or one of pydantic's words (``"true"``, ``"no"``...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int | float | str):
        msg = "Input should be a valid boolean, unable to interpret input"
        raise validation_error("bool_parsing", loc, msg, value)
    raise validation_error("bool_type", loc, "Input should be a valid boolean", value)


def strict_str(value: Any, loc: str) -> str:
    if isinstance(value, str):
        return value
    raise validation_error("string_type", loc, "Input should be a valid string", value)


def mapping(value: Any, loc: str) -> Mapping[str, Any]:
    """An object; ``loc`` empty: the request body itself, which FastAPI reports as
    ``model_attributes_type`` (a nested model field is pydantic's ``model_type``)."""
    if isinstance(value, Mapping):
        return value
    msg = "Input should be a valid dictionary or object to extract fields from"
    raise validation_error("model_attributes_type" if not loc else "model_type", loc, msg, value)


def opt_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    return None if value is None else lax_int(value, name)


def opt_float(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    return None if value is None else lax_float(value, name)


def opt_bool(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    return default if value is None else lax_bool(value, name)


def stop_strings(value: Any) -> tuple[str, ...]:
    """``stop``: a string or a list of at most 4 strings (vLLM's request models)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list):
        if len(value) > 4:
            msg = f"List should have at most 4 items after validation, not {len(value)}"
            ctx = {"field_type": "List", "max_length": 4, "actual_length": len(value)}
            raise validation_error("too_long", "stop", msg, value, ctx)
        return tuple(strict_str(s, f"stop.{i}") for i, s in enumerate(value) if s != "")
    raise validation_error("string_type", "stop", "Input should be a valid string", value)
