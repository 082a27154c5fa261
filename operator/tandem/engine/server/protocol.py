"""Parsing and validating OpenAI-style request bodies the way vLLM does. Pure.

Only what the simulator acts on is interpreted; other sampling fields are accepted and
ignored, as a real engine would accept them without changing the simulated timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tandem.engine.server.errors import ApiError, bad_request
from tandem.engine.server.text import (
    count_text_tokens,
    render_chat,
    text_block_hashes,
    token_block_hashes,
)

Kind = Literal["completion", "chat"]

#: completions default to 16 output tokens (vLLM's CompletionRequest.max_tokens)
COMPLETION_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class ParsedRequest:
    """A validated generation request."""

    kind: Kind
    model: str | None
    prompt_tokens: int
    prompt_key: str
    """Stable text identifying the prompt (seeds the output when ``seed`` is absent)."""
    block_hashes: tuple[int, ...]
    max_tokens: int | None
    """Requested output cap; None means up to the context limit (chat's default)."""
    stream: bool
    include_usage: bool
    continuous_usage: bool
    priority: int
    seed: int | None
    ignore_eos: bool
    kv_transfer_params: dict[str, Any] | None
    request_id: str | None
    """The body's ``request_id`` (the ``X-Request-Id`` header wins over it)."""


def _int_field(body: Mapping[str, Any], name: str, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{name}: Input should be a valid integer", name)
    if minimum is not None and value < minimum:
        raise bad_request(f"{name}: Input should be greater than or equal to {minimum}", name)
    return value


def _bool_field(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{name}: Input should be a valid boolean", name)
    return value


def _common(body: Mapping[str, Any]) -> dict[str, Any]:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model: Input should be a valid string", "model")
    stream = _bool_field(body, "stream")
    options = body.get("stream_options")
    if options and not stream:
        raise bad_request(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    if options is not None and not isinstance(options, Mapping):
        raise bad_request("stream_options: Input should be a valid dictionary", "stream_options")
    options = options or {}
    n = _int_field(body, "n", 1)
    if n not in (None, 1):
        raise bad_request("n: the simulated engine supports n=1 only", "n")
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, Mapping):
        raise bad_request(
            "kv_transfer_params: Input should be a valid dictionary", "kv_transfer_params"
        )
    request_id = body.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad_request("request_id: Input should be a valid string", "request_id")
    return {
        "model": model,
        "stream": stream,
        "include_usage": bool(options.get("include_usage")),
        "continuous_usage": bool(options.get("continuous_usage_stats")),
        "priority": _int_field(body, "priority") or 0,
        "seed": _int_field(body, "seed"),
        "ignore_eos": _bool_field(body, "ignore_eos"),
        "kv_transfer_params": dict(kv) if kv is not None else None,
        "request_id": request_id,
    }


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    )


def parse_completion(body: Any, block_size: int) -> ParsedRequest:
    """``POST /v1/completions``: ``prompt`` is a string or token ids (a single prompt)."""
    if not isinstance(body, Mapping):
        raise bad_request("Input should be a valid dictionary or object")
    common = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if prompt is None or prompt == "" or prompt == []:
        raise bad_request(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    if isinstance(prompt, str):
        tokens = count_text_tokens(prompt)
        hashes = text_block_hashes(prompt, block_size, tokens)
        key = prompt
    elif _is_token_list(prompt):
        tokens = len(prompt)
        hashes = token_block_hashes(prompt, block_size)
        key = ",".join(map(str, prompt))
    elif isinstance(prompt, list):
        raise bad_request(
            "prompt: the simulated engine accepts one prompt per request (a string or a list "
            "of token ids)",
            "prompt",
        )
    else:
        raise bad_request("prompt: Input should be a valid string or list of integers", "prompt")
    max_tokens = _int_field(body, "max_tokens", 1)
    return ParsedRequest(
        kind="completion",
        prompt_tokens=tokens,
        prompt_key=key,
        block_hashes=hashes,
        max_tokens=COMPLETION_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        **common,
    )


def parse_chat(body: Any, block_size: int) -> ParsedRequest:
    """``POST /v1/chat/completions``: ``messages`` rendered with a Llama-3-like template."""
    if not isinstance(body, Mapping):
        raise bad_request("Input should be a valid dictionary or object")
    common = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: Field required (a non-empty list)", "messages")
    for msg in messages:
        if not isinstance(msg, Mapping) or not isinstance(msg.get("role"), str):
            raise bad_request("messages: each message needs a string `role`", "messages")
    try:
        text, tokens = render_chat(messages)
    except ValueError as exc:
        raise bad_request(f"messages: {exc}", "messages") from exc
    max_tokens = _int_field(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", 1)
    return ParsedRequest(
        kind="chat",
        prompt_tokens=tokens,
        prompt_key=text,
        block_hashes=text_block_hashes(text, block_size, tokens),
        max_tokens=max_tokens,
        **common,
    )


def parse_body(kind: Kind, body: Any, block_size: int) -> ParsedRequest:
    try:
        if kind == "chat":
            return parse_chat(body, block_size)
        return parse_completion(body, block_size)
    except ApiError:
        raise
    except (TypeError, ValueError) as exc:
        raise bad_request(str(exc)) from exc
