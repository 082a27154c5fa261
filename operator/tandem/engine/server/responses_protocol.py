"""The Responses API (``POST /v1/responses``): its request model and its answers. Pure.

A Responses request is a conversation (``instructions`` as the system message, then
``input``: a string, or message items), generated as chat is; what differs is the shape of
the answer. :func:`parse_responses` reads a body as vLLM's ``ResponsesRequest`` does (its
validators first, then the fields with pydantic's lax rules) into the chat form the engine
serves plus :class:`Echo`, what the answer repeats of the request. :class:`ResponseEvents`
writes the answer: the response object, or its SSE events as vLLM streams them
(``response.created`` ... ``response.completed``, each ``event: <type>`` with a
``sequence_number``, and no ``[DONE]``).

The P/D fields are vLLM's: ``kv_transfer_params`` in the request, and the prefill engine's
in the response. Nothing is stored, as vLLM by default (``store`` is read and ignored):
``GET /v1/responses/{id}`` and ``previous_response_id`` find nothing, and a background
request is refused (:func:`check_stateless`). Tools are read, not called.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tandem.engine.server.errors import ApiError, invalid, validation_error
from tandem.engine.server.fields import (
    mapping,
    opt_bool,
    opt_float,
    opt_int,
    strict_str,
)
from tandem.engine.server.protocol import ParsedRequest, Prompt, common_fields
from tandem.engine.server.text import render_chat, text_block_hashes


@dataclass(frozen=True)
class Echo:
    """What a Responses answer repeats of its request (resolved, as vLLM echoes it)."""

    response_id: str
    instructions: str | None
    metadata: Any
    temperature: float
    top_p: float
    tool_choice: Any
    tools: list[Any]
    parallel_tool_calls: bool
    max_tool_calls: Any
    previous_response_id: Any
    reasoning: Any
    service_tier: Any
    text: Any
    truncation: Any
    user: Any
    presence_penalty: float
    frequency_penalty: float
    background: bool = False
    store: bool = True


def _check_validators(body: Mapping[str, Any]) -> None:
    """vLLM's ``mode="before"`` validators, on the raw values, before any field."""
    if body.get("background") and not body.get("store", True):
        raise invalid("background can only be used when `store` is true", "background")
    if body.get("prompt") is not None:
        raise invalid("prompt template is not supported", "prompt")
    tools, choice = body.get("tools"), body.get("tool_choice", "auto")
    if not tools:
        if choice == "required":
            raise invalid("Tool choice 'required' must be specified with 'tools' parameter.",
                          "tool_choice")  # fmt: skip
        if isinstance(choice, Mapping) and choice.get("type") == "function":
            raise invalid("Tool choice 'function' not found in 'tools' parameter.", "tool_choice")


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``instructions`` as the system message, then ``input`` (a string: one user message;
    items: the message items, their text parts; other item types carry no text here)."""
    given = body.get("input")
    if given is None:
        raise validation_error("missing", "input", "Field required", body)
    messages: list[Mapping[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        messages.append({"role": "system", "content": strict_str(instructions, "instructions")})
    if isinstance(given, str):
        return [*messages, {"role": "user", "content": given}]
    if not isinstance(given, list):
        raise validation_error("string_type", "input", "Input should be a valid string", given)
    for item in given:
        if isinstance(item, Mapping) and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": item.get("content")})
    return messages


def _text_schema(text: Any) -> Mapping[str, Any] | None:
    """``text.format`` as structured output (what ``response_format`` is to chat)."""
    if text is None:
        return None
    fmt = mapping(text, "text").get("format")
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_object":
        return {}
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return mapping(schema, "text.format.schema") if schema else {}
    return None


def parse_responses(body: Any, block_size: int, fresh_id: str) -> tuple[ParsedRequest, Echo]:
    """A ``/v1/responses`` body as the chat request the engine serves, and its echo; the
    response's id is the body's ``request_id``, else ``fresh_id``.

    >>> parsed, echo = parse_responses({"input": "Hi", "max_output_tokens": "3"}, 16, "r1")
    >>> parsed.max_tokens, parsed.prompt_tokens, echo.tool_choice, echo.response_id
    (3, 11, 'none', 'r1')
    """
    body = mapping(body, "")
    _check_validators(body)
    messages = _messages(body)
    common = common_fields(body)
    store = opt_bool(body, "store", default=True)
    background = opt_bool(body, "background")
    temperature = opt_float(body, "temperature")
    top_p = opt_float(body, "top_p")
    tools = body.get("tools") or []
    text, tokens = render_chat(messages)
    prompt = Prompt(tokens, text, text, text_block_hashes(text, block_size, tokens))
    parsed = ParsedRequest(
        kind="chat",
        prompts=(prompt,),
        max_tokens=opt_int(body, "max_output_tokens"),
        logprobs=None,
        echo=False,
        limit_field="max_output_tokens",
        **{**common, "n": 1, "json_schema": _text_schema(body.get("text"))},
    )
    request_id = parsed.request_id or fresh_id
    echo = Echo(
        response_id=request_id,
        instructions=body.get("instructions"),
        metadata=body.get("metadata"),
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        tool_choice=body.get("tool_choice", "auto") if tools else "none",
        tools=list(tools),
        parallel_tool_calls=opt_bool(body, "parallel_tool_calls", default=True),
        max_tool_calls=body.get("max_tool_calls"),
        previous_response_id=body.get("previous_response_id"),
        reasoning=body.get("reasoning"),
        service_tier=body.get("service_tier", "auto"),
        text=body.get("text"),
        truncation=body.get("truncation", "disabled"),
        user=body.get("user"),
        presence_penalty=opt_float(body, "presence_penalty") or 0.0,
        frequency_penalty=opt_float(body, "frequency_penalty") or 0.0,
        background=background,
        store=store,
    )
    return replace(parsed, request_id=request_id), echo


#: vLLM's answer to a background request when its response store is off (its default)
NO_BACKGROUND = (
    "This vLLM engine does not support `store=True` and therefore does not support the "
    "background mode. To enable these features, set the environment variable "
    "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."
)


def check_stateless(echo: Echo) -> None:
    """What vLLM answers, once the model is known, to requests that need its response
    store, which the sim (as vLLM by default) does not keep: a background request, and a
    ``previous_response_id`` (there is none to find)."""
    if echo.background and echo.store:
        raise ApiError(400, NO_BACKGROUND, "invalid_request_error", "background")
    if echo.previous_response_id is not None:
        raise response_not_found(str(echo.previous_response_id))


def response_not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.",
                    "invalid_request_error", "response_id")  # fmt: skip


def usage_of(input_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def _part(text: str, logprobs: Any = None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


class ResponseEvents:
    """The answer to one Responses request: the response object and, when it streams, its
    events in order (each numbered by ``sequence_number``)."""

    def __init__(
        self, echo: Echo, model: str, created: int, max_output_tokens: int, item_id: str
    ) -> None:
        self.echo = echo
        self.model = model
        self.created = created
        self.max_output_tokens = max_output_tokens
        self.item_id = item_id
        self.sequence = 0

    def item(self, text: str | None) -> dict[str, Any]:
        """The output message; ``None``: still in progress (no content yet)."""
        return {
            "id": self.item_id,
            "content": [_part(text)] if text else [],
            "role": "assistant",
            "status": "in_progress" if text is None else "completed",
            "type": "message",
            "phase": None,
        }

    def response(
        self,
        *,
        text: str | None = None,
        finish_reason: str | None = None,
        usage: dict[str, Any] | None = None,
        kv_transfer_params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The response object: in progress until ``finish_reason`` is known; a ``length``
        finish is ``incomplete`` (``max_output_tokens``), any other ``completed``."""
        e = self.echo
        if finish_reason is None:
            status, incomplete, output = "in_progress", None, []
        elif finish_reason == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
            output = [self.item(text or "")]
        else:
            status, incomplete, output = "completed", None, [self.item(text or "")]
        return {
            "id": e.response_id, "created_at": self.created,
            "incomplete_details": incomplete, "instructions": e.instructions,
            "metadata": e.metadata, "model": self.model, "object": "response",
            "output": output, "parallel_tool_calls": e.parallel_tool_calls,
            "temperature": e.temperature, "tool_choice": e.tool_choice, "tools": e.tools,
            "top_p": e.top_p, "background": False, "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": e.max_tool_calls, "previous_response_id": e.previous_response_id,
            "prompt": None, "reasoning": e.reasoning, "service_tier": e.service_tier,
            "status": status, "text": e.text, "top_logprobs": None, "truncation": e.truncation,
            "usage": usage, "user": e.user, "presence_penalty": e.presence_penalty,
            "frequency_penalty": e.frequency_penalty, "kv_transfer_params": kv_transfer_params,
            "ec_transfer_params": None, "input_messages": None, "output_messages": None,
        }  # fmt: skip

    def frame(self, kind: str, fields: dict[str, Any]) -> bytes:
        """One SSE event, numbered."""
        data = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

    def opening(self) -> bytes:
        """``response.created`` through ``response.content_part.added``."""
        started = self.response()
        ref = {"item_id": self.item_id, "output_index": 0}
        return b"".join((
            self.frame("response.created", {"response": started}),
            self.frame("response.in_progress", {"response": started}),
            self.frame("response.output_item.added", {"item": self.item(None),
                                                       "output_index": 0}),
            self.frame("response.content_part.added", {"content_index": 0, **ref,
                                                        "part": _part("", [])}),
        ))  # fmt: skip

    def delta(self, text: str) -> bytes:
        return self.frame("response.output_text.delta", {
            "content_index": 0, "delta": text, "item_id": self.item_id, "logprobs": [],
            "output_index": 0,
        })  # fmt: skip

    def closing(self, final: dict[str, Any]) -> bytes:
        """``response.output_text.done`` through ``response.completed`` (the final object,
        whatever its status, as vLLM names it)."""
        text = "".join(p["text"] for item in final["output"] for p in item["content"])
        ref = {"item_id": self.item_id, "output_index": 0}
        return b"".join((
            self.frame("response.output_text.done", {"content_index": 0, **ref,
                                                      "logprobs": [], "text": text}),
            self.frame("response.content_part.done", {"content_index": 0, **ref,
                                                       "part": _part(text)}),
            self.frame("response.output_item.done", {"item": self.item(text),
                                                      "output_index": 0}),
            self.frame("response.completed", {"response": final}),
        ))  # fmt: skip
