"""OpenAI request bodies: validation, the two P/D legs' rewrites, error bodies, SSE. Pure.

The prefill and decode rewrites follow vLLM 0.34's NIXL pull handoff (the fields of
its ``toy_proxy_server.py``, which llm-d's sidecar uses too):

- prefill leg: the original body with ``stream=false``, ``max_tokens=1`` (and
  ``max_completion_tokens=1`` when present), no ``stream_options``, ``min_tokens`` or
  ``min_completion_tokens``, and ``kv_transfer_params`` asking for remote decode;
- decode leg: the original body plus the ``kv_transfer_params`` the prefill engine
  returned, copied verbatim.

A client's own ``kv_transfer_params`` are always dropped: they name the host a decode
engine pulls KV from, which only the router may choose. A client's ``priority`` is
dropped too; the router sets it from the request's class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["completions", "chat"]

#: Rough characters per token of BPE tokenizers on English text; the router estimates
#: prompt sizes without a tokenizer, for load accounting only.
CHARS_PER_TOKEN = 4
#: Per-message overhead of chat templates, in tokens.
TOKENS_PER_MESSAGE = 4
#: KV-cache lease margin: a lease expiring sooner than this is not trusted for a retry.
LEASE_MARGIN_S = 2.0

PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


class RequestError(ValueError):
    """A request the router rejects itself; ``status`` is the HTTP status (4xx)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


@dataclass(frozen=True)
class ParsedRequest:
    """A validated completions or chat body and what the router derived from it."""

    kind: Kind
    body: dict[str, Any]
    """The client's body without ``kv_transfer_params`` and ``priority``."""
    stream: bool
    prompt_tokens: int
    """Estimated prompt length (tokens), for load accounting and the short-prompt rule."""
    prefix: bytes
    """The prompt's leading text, for prefix affinity."""


def parse_request(raw: bytes, kind: Kind, *, prefix_chars: int) -> ParsedRequest:
    """Validate the fields the router reads or rewrites; raise :class:`RequestError`.

    Everything else is the engine's to judge (it answers 400 and the router passes that
    on). ``prefix_chars`` bounds the prefix kept for affinity.
    """
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"request body is not valid JSON: {err}") from None
    except RecursionError:
        raise RequestError("request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise RequestError(f"request body must be a JSON object, got {_json_type(body)}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("model must be a string", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    if options is not None and not stream:
        raise RequestError("stream_options is only allowed with stream=true", param="stream")
    for name in ("max_tokens", "max_completion_tokens"):
        _check_count(body, name, minimum=1)  # vLLM's bound; checked here to spare a prefill
    for name in ("min_tokens", "min_completion_tokens"):
        _check_count(body, name, minimum=0)
    text = _chat_text(body) if kind == "chat" else _prompt_text(body)
    body.pop("kv_transfer_params", None)
    body.pop("priority", None)
    return ParsedRequest(
        kind=kind,
        body=body,
        stream=stream,
        prompt_tokens=_estimate_tokens(text, body, kind),
        prefix=text[:prefix_chars].encode("utf-8", "surrogatepass"),
    )


def _check_count(body: dict[str, Any], name: str, *, minimum: int) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < 2**31:
        raise RequestError(
            f"{name} must be an integer in [{minimum}, 2^31), got {value!r}", param=name
        )


def _chat_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty array", param="messages")
    parts: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(
                f"messages[{index}] must be an object with a string role", param="messages"
            )
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
        elif content is not None:
            raise RequestError(
                f"messages[{index}].content must be a string, an array or null",
                param="messages",
            )
    return "\n".join(parts)


def _prompt_text(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return " ".join(map(str, prompt))
        if all(isinstance(p, list) and _is_token_list(p) for p in prompt):
            return " ".join(" ".join(map(str, p)) for p in prompt)
    raise RequestError(
        "prompt must be a string, an array of strings, an array of token ids or an array "
        "of token-id arrays",
        param="prompt",
    )


def _is_token_list(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(t, int) and not isinstance(t, bool) for t in items)


def _estimate_tokens(text: str, body: dict[str, Any], kind: Kind) -> int:
    prompt = body.get("prompt")
    if kind == "completions" and isinstance(prompt, list) and prompt:
        if isinstance(prompt[0], int):
            return len(prompt)
        if isinstance(prompt[0], list):
            return sum(len(p) for p in prompt)
    overhead = TOKENS_PER_MESSAGE * len(body.get("messages", ())) if kind == "chat" else 0
    return len(text) // CHARS_PER_TOKEN + overhead + 1


def build_prefill_body(body: dict[str, Any], priority: int | None) -> dict[str, Any]:
    """The prefill leg's body: one token, no streaming, remote decode requested."""
    out = dict(body)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    for name in ("stream_options", "min_tokens", "min_completion_tokens"):
        out.pop(name, None)
    out["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    if priority is not None:
        out["priority"] = priority
    return out


def build_decode_body(
    body: dict[str, Any], kv_params: dict[str, Any] | None, priority: int | None
) -> dict[str, Any]:
    """The decode (or aggregated) leg's body: the original plus the prefill's KV params."""
    out = dict(body)
    if kv_params is not None:
        out["kv_transfer_params"] = kv_params
    if priority is not None:
        out["priority"] = priority
    return out


def parse_kv_params(raw: bytes) -> dict[str, Any] | None:
    """The top-level ``kv_transfer_params`` of a prefill answer; ``None`` when absent.

    vLLM returns them only for a request that finished by stop or length; an aborted
    one has none, and its KV cannot be handed off.
    """
    try:
        answer = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
    return params if isinstance(params, dict) and params else None


def decide_kv_reusable(kv_params: dict[str, Any], *, delivered: bool, now_epoch_s: float) -> bool:
    """Whether a decode retry may reuse the KV blocks a prefill engine holds.

    Not once the failed decode engine may have received the request (``delivered``):
    it may have pulled the blocks, and the prefill engine frees them after a read. Not
    when the lease (``remote_blocks_expiry_time``, Unix seconds) ends within
    ``LEASE_MARGIN_S``. Otherwise the blocks are still leased to us.
    """
    if delivered:
        return False
    expiry = kv_params.get("remote_blocks_expiry_time")
    if isinstance(expiry, int | float) and not isinstance(expiry, bool):
        return float(expiry) - now_epoch_s > LEASE_MARGIN_S
    return True


def build_error_body(
    message: str, *, status: int, error_type: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object, as vLLM writes it."""
    return {
        "error": {
            "message": message,
            "type": error_type or ERROR_TYPES.get(status, "InternalServerError"),
            "param": param,
            "code": status,
        }
    }


ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    413: "RequestEntityTooLargeError",
    429: "RateLimitError",
    499: "ClientClosedRequest",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def build_sse_error(message: str, *, status: int, after_partial_event: bool) -> bytes:
    """An SSE error event followed by ``[DONE]``, ending a stream that broke.

    ``after_partial_event``: the bytes relayed so far stopped inside an event, which the
    blank line first terminates so the client's SSE parser stays in step.
    """
    event = json.dumps(build_error_body(message, status=status), separators=(",", ":"))
    lead = b"\n\n" if after_partial_event else b""
    return lead + b"data: " + event.encode() + b"\n\ndata: [DONE]\n\n"


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def parse_prompt_tokens(raw: bytes) -> int | None:
    """``usage.prompt_tokens`` of an engine's answer: the prompt as the engine's tokenizer
    counted it (``None`` when absent).

    >>> parse_prompt_tokens(b'{"usage": {"prompt_tokens": 1234, "completion_tokens": 1}}')
    1234
    """
    try:
        answer = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return (
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None
    )
