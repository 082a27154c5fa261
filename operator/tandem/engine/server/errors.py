"""vLLM's error responses: ``{"error": {"message", "type", "param", "code"}}``. Pure."""

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


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A malformed or invalid body (vLLM reports pydantic failures with type ``Bad Request``)."""
    return ApiError(400, message, "Bad Request", param)


def prompt_too_long(max_model_len: int, prompt_tokens: int) -> ApiError:
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
