"""vLLM's error responses: ``{"error": {"message", "type", "param", "code"}}``. Pure.

vLLM answers a bad request in one of two families, and so does the simulated engine:

- its own checks (``VLLMValidationError``): type ``BadRequestError``, ``param`` the bare
  field, the message ending `` (parameter=<field>[, value=<value>])``;
- request-model validation (pydantic): type ``Bad Request``, ``param`` the first error's
  location (``body.max_tokens``), the message pydantic's printed error list.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """An error to answer with vLLM's body and status."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.err_type, self.param)


def error_body(
    status: int, message: str, err_type: str, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def invalid(message: str, param: str | None = None, value: Any = None) -> ApiError:
    """A failed check of vLLM's own (``VLLMValidationError``), with its suffix.

    >>> invalid("max_tokens must be at least 1, got 0.", "max_tokens", 0).message
    'max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)'
    """
    extras = []
    if param is not None:
        extras.append(f"parameter={param}")
    if value is not None:
        extras.append(f"value={value}")
    text = f"{message} ({', '.join(extras)})" if extras else message
    return ApiError(400, text, "BadRequestError", param)


def _shown_input(value: Any) -> str:
    """How vLLM prints a rejected input: lists and dicts by size, the rest as text."""
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    return str(value)


def validation_error(
    kind: str, loc: str, msg: str, value: Any, ctx: dict[str, Any] | None = None
) -> ApiError:
    """A request-model (pydantic) failure at ``loc`` (``max_tokens``, ``response_format.type``).

    >>> validation_error("int_parsing", "n", "Input should be a valid integer", "x").param
    'body.n'
    """
    return validation_errors([(kind, loc, msg, value, ctx)])


def validation_errors(
    errors: list[tuple[str, str, str, Any, dict[str, Any] | None]],
) -> ApiError:
    """Several request-model failures at once (``(type, loc, msg, input, ctx)`` each), as
    pydantic lists them; ``param`` is the first one's location.

    >>> err = validation_errors([("missing", "prompt", "Field required", {}, None),
    ...                          ("missing", "messages", "Field required", {}, None)])
    >>> err.message.splitlines()[0], err.param
    ('2 validation errors:', 'body.prompt')
    >>> err.message.splitlines()[2]
    "  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', 'input': '<dict of 0 items>'}"
    """  # noqa: E501
    shown = []
    for kind, loc, msg, value, ctx in errors:
        where = f"body.{loc}" if loc else "body"
        error: dict[str, Any] = {"type": kind, "loc": where, "msg": msg}
        error["input"] = _shown_input(value)
        if ctx:
            error["ctx"] = ctx
        shown.append(repr(error))
    count = f"{len(errors)} validation error" + ("s" if len(errors) > 1 else "")
    first = errors[0][1]
    param = f"body.{first}" if first else "body"
    return ApiError(400, f"{count}:\n  " + "\n  ".join(shown), "Bad Request", param)


def invalid_json(position: int, reason: str) -> ApiError:
    """A body that is not JSON: vLLM reports pydantic's ``json_invalid`` at the offset."""
    ctx = {"error": reason}
    return validation_error("json_invalid", str(position), "JSON decode error", {}, ctx)


def prompt_too_long(max_model_len: int, prompt_tokens: int) -> ApiError:
    """vLLM 0.34's text (the reference sheet); 0.32 says "at least N+1" and adds the suffix."""
    return ApiError(
        400,
        f"This model's maximum context length is {max_model_len} tokens. However, your "
        f"prompt contains {prompt_tokens} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt.",
        "BadRequestError",
        "input_tokens",
    )


def model_not_found(model: str) -> ApiError:
    return ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, message, "ServiceUnavailableError")


def internal_error(message: str = "Internal server error") -> ApiError:
    return ApiError(500, message, "InternalServerError")


def sse_error_event(err: ApiError) -> bytes:
    """The SSE frame vLLM sends when a stream fails mid-way (followed by ``[DONE]``)."""
    return f"data: {json.dumps(err.body())}\n\n".encode()
