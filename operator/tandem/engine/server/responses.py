"""Response bodies and SSE chunks in vLLM's shapes. Pure.

Streaming chunks of the common case (choice 0, no logprobs) are built from a prefix and
suffix rendered once, so the cost per token is a string join, not a JSON encode of the
whole chunk.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.engine.server.choice import ChoiceText
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


def completion_logprobs(
    choice: ChoiceText, start: int, stop: int, k: int, greedy: bool, offset: int = 0
) -> dict[str, Any]:
    """``logprobs`` of completions for output tokens ``start``..``stop - 1``: the sampled
    token first in each ``top_logprobs`` entry, then the ``k`` most likely."""
    tokens, values, tops, offsets = [], [], [], []
    for i in range(start, stop):
        token = choice.token(i)
        lp, top = choice.logprobs(i, k, greedy)
        tokens.append(token)
        values.append(lp)
        tops.append({token: lp, **{w: v for w, v in top if w != token}})
        offsets.append(offset + choice.offset(i))
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens,
            "top_logprobs": tops}  # fmt: skip


def prompt_logprobs(pieces: list[str]) -> dict[str, Any]:
    """``echo`` with ``logprobs``: the prompt's tokens lead, the first without a logprob."""
    values: list[float | None] = [None]
    tops: list[dict[str, float] | None] = [None]
    offsets = [0]
    for i, piece in enumerate(pieces[1:], start=1):
        lp = -1.0 - (i % 7) * 0.5
        values.append(lp)
        tops.append({piece: lp})
        offsets.append(offsets[-1] + len(pieces[i - 1]))
    return {"text_offset": offsets, "token_logprobs": values, "tokens": list(pieces),
            "top_logprobs": tops}  # fmt: skip


def merge_logprobs(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    return {key: first[key] + second[key] for key in first}


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(choice: ChoiceText, start: int, stop: int, k: int, greedy: bool) -> Any:
    """Chat's ``logprobs.content``: each token with exactly ``k`` ``top_logprobs``, the
    sampled token first (vLLM 0.32 CPU and the reference sheet agree)."""
    content = []
    for i in range(start, stop):
        token = choice.token(i)
        lp, top = choice.logprobs(i, k, greedy)
        alternatives = [(w, v) for w, v in top if w != token]
        listed = [(token, lp), *alternatives][:k]
        content.append({**_entry(token, lp), "top_logprobs": [_entry(w, v) for w, v in listed]})
    return {"content": content}


def completion_choice(
    index: int, text: str, finish_reason: str | None, stop_reason: str | None, logprobs: Any
) -> dict[str, Any]:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "prompt_logprobs": None,
    }


def chat_choice(
    index: int, text: str, finish_reason: str | None, stop_reason: str | None, logprobs: Any
) -> dict[str, Any]:
    return {
        "index": index,
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
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def build_response(
    kind: Kind,
    response_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, Any],
    kv_transfer_params: dict[str, Any] | None,
) -> dict[str, Any]:
    """A non-streaming completion or chat completion."""
    return {
        "id": response_id,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
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

    def token_chunk(self, text: str, index: int = 0, logprobs: Any = None) -> bytes:
        """A chunk carrying ``text`` (choice 0 without logprobs: the fast path)."""
        if index == 0 and logprobs is None:
            return (self._head + json.dumps(text) + self._tail).encode()
        return self._chunk([self._choice(text, None, None, index, logprobs)])

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

    def role_chunk(self, index: int = 0) -> bytes:
        """Chat only: the first chunk of each choice, announcing the assistant role."""
        delta = {"role": "assistant", "content": ""}
        return self._chunk(
            [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]
        )

    def _choice(
        self,
        text: str,
        finish_reason: str | None,
        stop_reason: str | None,
        index: int,
        logprobs: Any,
    ) -> dict[str, Any]:
        if self._kind == "chat":
            out: dict[str, Any] = {
                "index": index,
                "delta": {"content": text},
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                out["stop_reason"] = stop_reason
            return out
        return {
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
        }

    def full_chunk(
        self,
        text: str,
        finish_reason: str | None,
        usage: dict[str, Any] | None = None,
        kv_transfer_params: dict[str, Any] | None = None,
        *,
        index: int = 0,
        stop_reason: str | None = None,
        logprobs: Any = None,
    ) -> bytes:
        """A chunk with optional finish reason, per-chunk usage and ``kv_transfer_params``."""
        extra = {"kv_transfer_params": kv_transfer_params} if kv_transfer_params else None
        choice = self._choice(text, finish_reason, stop_reason, index, logprobs)
        return self._chunk([choice], usage, extra)

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        """The trailing ``stream_options.include_usage`` chunk (no choices)."""
        return self._chunk([], usage)
