"""What the router reads from a request body, read as vLLM's request models read it. Pure.

The router needs little of a body: whether the answer streams, a prompt-size estimate and
prefix (for load accounting, affinity and the short-prompt rule), and the fields its
prefill rewrite changes. Everything else is the engine's to judge: it answers as the real
vLLM it is (or the simulated engine, which answers as vLLM does), and the router passes
that answer on. So the router refuses only a body that is not a JSON object, with vLLM's
own pydantic errors (:mod:`tandem.engine.server.errors`), and reads the fields it needs
with pydantic's lax rules as vLLM does (:mod:`tandem.engine.server.fields`):
``"max_tokens": "5"`` and ``"stream": "true"`` are accepted, ``"messages": []`` reaches the
engine, which refuses it with vLLM's message.

One case needs care. The prefill leg rewrites ``stream``, the token limits and
``stream_options`` (:func:`tandem.router.protocol.build_prefill_body`), so a prefill engine
never sees a bad value there; the decode engine would refuse it after a wasted prefill. A
body whose rewritten fields the router cannot vouch for skips the prefill leg
(:attr:`ParsedRequest.skip_prefill`): the decode engine judges it at once, with vLLM's
exact answer, in vLLM's order of checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tandem.engine.server.errors import ApiError, invalid_json
from tandem.engine.server.fields import lax_bool, lax_int, mapping

Kind = Literal["completions", "chat", "responses"]

#: Rough characters per token of BPE tokenizers on English text; the router estimates
#: prompt sizes without a tokenizer, for load accounting only.
CHARS_PER_TOKEN = 4
#: Per-message overhead of chat templates, in tokens.
TOKENS_PER_MESSAGE = 4
#: Output limits each API takes (all must be >= 1 when given, vLLM's own check).
OUTPUT_LIMITS: dict[Kind, tuple[str, ...]] = {
    "completions": ("max_tokens",),
    "chat": ("max_tokens", "max_completion_tokens"),
    "responses": ("max_output_tokens",),
}
#: Output minimums the prefill leg drops (must be >= 0 and at most the limit).
OUTPUT_MINIMUMS = ("min_tokens", "min_completion_tokens")
#: The field holding each API's prompt. Without it the engine refuses the body, naming
#: the body's size: the decode engine judges the client's own body, not the rewrite.
PROMPT_FIELDS: dict[Kind, str] = {"completions": "prompt", "chat": "messages", "responses": "input"}


@dataclass(frozen=True)
class ParsedRequest:
    """A request body as the router sees it and what it derived from it."""

    kind: Kind
    body: dict[str, Any]
    """The client's body without ``kv_transfer_params`` and ``priority``."""
    stream: bool
    """Whether the answer streams (SSE); False when ``stream`` cannot be read (the engine
    then refuses the body, and a refusal is never a stream)."""
    prompt_tokens: int
    """Estimated prompt length (tokens), for load accounting and the short-prompt rule."""
    prefix: bytes
    """The prompt's leading text, for prefix affinity."""
    skip_prefill: bool = False
    """The prefill rewrite would hide a value the decode engine may refuse: the request
    goes straight to a decode engine, which judges it (see the module docstring)."""


def parse_request(raw: bytes, kind: Kind, *, prefix_chars: int) -> ParsedRequest:
    """Read ``raw`` as vLLM reads a body of ``kind``; raise :class:`ApiError` only for a
    body that is not a JSON object (vLLM's pydantic answer, 400). ``prefix_chars`` bounds
    the prefix kept for affinity.

    >>> parse_request(b'{"prompt": "hi", "max_tokens": "5", "stream": "true"}',
    ...               "completions", prefix_chars=8).stream
    True
    >>> parse_request(b'{"prompt": "hi", "max_tokens": 0}', "completions",
    ...               prefix_chars=8).skip_prefill
    True
    """
    body = decode_body(raw)
    stream, readable = read_stream(body)
    skip = (
        not readable
        or body.get(PROMPT_FIELDS[kind]) is None
        or not _limits_pass(body, kind)
        or _refused_stream_options(body)
    )
    if kind == "responses" and body.get("background"):
        skip = True  # background answers at once and needs the engine's store
    text = compute_prompt_text(body, kind)
    body.pop("kv_transfer_params", None)
    body.pop("priority", None)
    return ParsedRequest(
        kind=kind,
        body=body,
        stream=stream,
        prompt_tokens=estimate_prompt_tokens(text, body, kind),
        prefix=text[:prefix_chars].encode("utf-8", "surrogatepass"),
        skip_prefill=skip,
    )


def decode_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body, or vLLM's 400 for anything else.

    >>> decode_body(b'{"a": 1}')
    {'a': 1}
    >>> decode_body(b"[1]")
    Traceback (most recent call last):
    ...
    tandem.engine.server.errors.ApiError: 1 validation error:
      {'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': '<list of 1 items>'}
    """  # noqa: E501
    try:
        body: Any = json.loads(raw)
    except json.JSONDecodeError as err:
        raise invalid_json(err.pos, err.msg) from None
    except UnicodeDecodeError as err:
        raise invalid_json(err.start, "Invalid UTF-8") from None
    except RecursionError:
        raise invalid_json(0, "recursion limit exceeded") from None
    return dict(mapping(body, "")) if not isinstance(body, dict) else body


def read_stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(stream, readable)``: the ``stream`` field read leniently as pydantic reads a
    boolean; ``readable`` is False when the engine will refuse it."""
    value = body.get("stream")
    if value is None:
        return False, True
    try:
        return lax_bool(value, "stream"), True
    except ApiError:
        return False, False


def _limits_pass(body: Mapping[str, Any], kind: Kind) -> bool:
    """Whether every output limit the prefill rewrite changes is one vLLM accepts."""
    limits = []
    for name in OUTPUT_LIMITS[kind]:
        value = _count(body, name)
        if value is False or (value is not None and value < 1):
            return False
        if value is not None:
            limits.append(value)
    if kind == "responses":
        return True
    for name in OUTPUT_MINIMUMS:
        value = _count(body, name)
        if value is False or (value is not None and (value < 0 or any(value > m for m in limits))):
            return False
    return True


def _count(body: Mapping[str, Any], name: str) -> int | Literal[False] | None:
    """A lax integer field: its value, None when absent, False when vLLM refuses its type."""
    value = body.get(name)
    if value is None:
        return None
    try:
        return lax_int(value, name)
    except ApiError:
        return False


def _refused_stream_options(body: Mapping[str, Any]) -> bool:
    """vLLM's own check, on the raw fields as its validator reads them (truthiness: an empty
    ``stream_options`` passes, and so does ``stream: "false"``)."""
    return bool(body.get("stream_options")) and not body.get("stream")


def compute_prompt_text(body: Mapping[str, Any], kind: Kind) -> str:
    """The prompt's text, read leniently (what the router cannot read counts as empty)."""
    if kind == "chat":
        messages = body.get("messages")
        return _messages_text(messages) if isinstance(messages, list) else ""
    if kind == "responses":
        parts = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
        given = body.get("input")
        if isinstance(given, str):
            parts.append(given)
        elif isinstance(given, list):
            parts.append(_messages_text(given))
        return "\n".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if _is_token_list(prompt):
            return " ".join(map(str, prompt))
        if all(isinstance(p, list) and _is_token_list(p) for p in prompt):
            return " ".join(" ".join(map(str, p)) for p in prompt)
    return ""


def _messages_text(messages: list[Any]) -> str:
    """Text of chat messages (or Responses input items): string contents and text parts."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "\n".join(parts)


def _is_token_list(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(t, int) and not isinstance(t, bool) for t in items)


def estimate_prompt_tokens(text: str, body: Mapping[str, Any], kind: Kind) -> int:
    """Prompt tokens, estimated: token-id prompts counted, text at 4 characters a token
    plus the chat template's overhead per message.

    >>> estimate_prompt_tokens("x" * 400, {"messages": [{}]}, "chat")
    105
    """
    prompt = body.get("prompt")
    if kind == "completions" and isinstance(prompt, list) and prompt:
        if _is_token_list(prompt):
            return len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return sum(len(p) for p in prompt)
    items = body.get("messages") if kind == "chat" else body.get("input")
    messages = len(items) if kind != "completions" and isinstance(items, list) else 0
    return len(text) // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * messages + 1
