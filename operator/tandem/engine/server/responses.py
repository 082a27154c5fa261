"""Response bodies and SSE chunks in vLLM's shapes. Pure.

Streaming chunks are built from a per-request prefix and suffix rendered once, so the cost
per token is a string join, not a JSON encode of the whole chunk.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.engine.server.protocol import Kind

DONE_EVENT = b"data: [DONE]\n\n"


def usage_dict(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None
) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }
    if cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return usage


def build_response(
    kind: Kind,
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage: dict[str, Any],
    kv_transfer_params: dict[str, Any] | None,
) -> dict[str, Any]:
    """A non-streaming completion or chat completion."""
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        obj = "text_completion"
    return {
        "id": response_id,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage,
        "prompt_logprobs": None,
        "kv_transfer_params": kv_transfer_params,
    }


class ChunkFormatter:
    """SSE frames for one streaming request."""

    __slots__ = ("_head", "_kind", "_obj", "_tail", "created", "model", "response_id")

    def __init__(self, kind: Kind, response_id: str, created: int, model: str) -> None:
        self._kind = kind
        self.response_id = response_id
        self.created = created
        self.model = model
        self._obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = json.dumps(
            {"id": response_id, "object": self._obj, "created": created, "model": model}
        )[:-1]
        if kind == "chat":
            self._head = "data: " + head + ', "choices": [{"index": 0, "delta": {"content": '
            self._tail = '}, "logprobs": null, "finish_reason": null}]}\n\n'
        else:
            self._head = "data: " + head + ', "choices": [{"index": 0, "text": '
            self._tail = ', "logprobs": null, "finish_reason": null, "stop_reason": null}]}\n\n'

    def token_chunk(self, text: str) -> bytes:
        """A chunk carrying ``text`` (the common, fast path)."""
        return (self._head + json.dumps(text) + self._tail).encode()

    def _chunk(
        self,
        choices: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> bytes:
        obj: dict[str, Any] = {
            "id": self.response_id,
            "object": self._obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            obj["usage"] = usage
        if extra:
            obj.update(extra)
        return f"data: {json.dumps(obj)}\n\n".encode()

    def role_chunk(self) -> bytes:
        """Chat only: the first chunk, announcing the assistant role."""
        delta = {"role": "assistant", "content": ""}
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def _choice(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self._kind == "chat":
            return {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        return {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }

    def full_chunk(
        self,
        text: str,
        finish_reason: str | None,
        usage: dict[str, Any] | None = None,
        kv_transfer_params: dict[str, Any] | None = None,
    ) -> bytes:
        """A chunk with optional finish reason, per-chunk usage and ``kv_transfer_params``."""
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        return self._chunk([self._choice(text, finish_reason)], usage, extra)

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        """The trailing ``stream_options.include_usage`` chunk (no choices)."""
        return self._chunk([], usage)
