"""The two P/D legs' rewrites of a request body, error bodies, SSE endings. Pure.

The prefill and decode rewrites follow vLLM 0.34's NIXL pull handoff (the fields of
its ``toy_proxy_server.py``, which llm-d's sidecar uses too):

- prefill leg: the original body with ``stream=false``, ``max_tokens=1`` (and
  ``max_completion_tokens=1`` when present), no ``stream_options``, ``min_tokens`` or
  ``min_completion_tokens``, and ``kv_transfer_params`` asking for remote decode; for the
  Responses API ``max_output_tokens=1`` and ``store=false`` (the prefill engine keeps no
  one-token response) instead of the token limits;
- decode leg: the original body plus the ``kv_transfer_params`` the prefill engine
  returned, copied verbatim.

A client's own ``kv_transfer_params`` are always dropped: they name the host a decode
engine pulls KV from, which only the router may choose. A client's ``priority`` is
dropped too; the router sets it from the request's class. What the router reads from a
body, and how, is :mod:`tandem.router.request`.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.router.request import Kind

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


def build_prefill_body(
    body: dict[str, Any], priority: int | None, kind: Kind = "completions"
) -> dict[str, Any]:
    """The prefill leg's body: one token, no streaming, remote decode requested."""
    out = dict(body)
    out["stream"] = False
    if kind == "responses":
        out["max_output_tokens"] = 1
        out["store"] = False
    else:
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


def parse_prefill_answer(raw: bytes) -> tuple[dict[str, Any] | None, int | None]:
    """A prefill answer's top-level ``kv_transfer_params`` (``None`` when absent) and its
    ``usage.prompt_tokens`` (``None`` when absent), from one decoding of the body.

    vLLM returns the parameters only for a request that finished by stop or length; an
    aborted one has none, and its KV cannot be handed off.

    >>> parse_prefill_answer(b'{"kv_transfer_params": {"remote_engine_id": "e"},'
    ...                      b' "usage": {"prompt_tokens": 12}}')
    ({'remote_engine_id': 'e'}, 12)
    >>> parse_prefill_answer(b"not json")
    (None, None)
    """
    try:
        answer = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None, None
    if not isinstance(answer, dict):
        return None, None
    params = answer.get("kv_transfer_params")
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        tokens = None
    return (params if isinstance(params, dict) and params else None), tokens


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
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    429: "RateLimitError",
    499: "ClientClosedRequest",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def build_sse_error(
    message: str, *, status: int, after_partial_event: bool, kind: Kind = "completions"
) -> bytes:
    """An SSE error event ending a stream that broke: ``data: {"error": ...}`` then
    ``[DONE]`` for completions and chat; for the Responses API, whose streams end without
    ``[DONE]``, an ``error`` event (its data carries ``"type": "error"`` and the same
    ``error`` object, which the ``openai`` client raises as an ``APIError``).

    ``after_partial_event``: the bytes relayed so far stopped inside an event, which the
    blank line first terminates so the client's SSE parser stays in step.
    """
    lead = b"\n\n" if after_partial_event else b""
    body = build_error_body(message, status=status)
    if kind == "responses":
        event = json.dumps({"type": "error", **body}, separators=(",", ":"))
        return lead + b"event: error\ndata: " + event.encode() + b"\n\n"
    event = json.dumps(body, separators=(",", ":"))
    return lead + b"data: " + event.encode() + b"\n\n" + DONE


DONE = b"data: [DONE]\n\n"
#: The events that end a Responses stream: the response in its final state.
RESPONSES_FINAL_EVENTS = frozenset(
    {b"response.completed", b"response.incomplete", b"response.failed"}
)
#: Bytes of a stream's end kept between chunks: more than the longest final event line.
TAIL_BYTES = 64


class StreamEnd:
    r"""How a relayed SSE stream ends, followed chunk by chunk at a cost that does not grow
    with the stream: only the last :data:`TAIL_BYTES` bytes are kept.

    Completions and chat streams are whole when they end with ``data: [DONE]``; Responses
    streams have no ``[DONE]`` and are whole when their last event is a final one
    (``response.completed``...) and it ended.

    >>> end = StreamEnd("responses")
    >>> end.feed(b"event: response.created\ndata: {}\n\nevent: response.compl")
    >>> end.complete, end.partial
    (False, True)
    >>> end.feed(b'eted\ndata: {"type": "response.completed"}\n\n')
    >>> end.complete, end.partial
    (True, False)
    """

    __slots__ = ("_event", "_responses", "tail")

    def __init__(self, kind: Kind) -> None:
        self._responses = kind == "responses"
        self._event = b""
        self.tail = b"\n"  # the stream starts at a line start

    def feed(self, chunk: bytes) -> None:
        if self._responses:
            # An event line starts after a newline; a data line never holds one (JSON
            # escapes it), so text that reads "event: " inside data is never taken for an
            # event. The window overlaps the last chunk: a line split across chunks is
            # found whole in the next window.
            window = self.tail + chunk
            at = window.rfind(b"\nevent: ")
            if at >= 0:
                line_end = window.find(b"\n", at + 1)
                if line_end >= 0:
                    self._event = window[at + 8 : line_end].rstrip(b"\r")
        if len(chunk) < TAIL_BYTES:
            self.tail = (self.tail + chunk)[-TAIL_BYTES:]
        else:
            self.tail = chunk[-TAIL_BYTES:]

    @property
    def complete(self) -> bool:
        if self._responses:
            return self._event in RESPONSES_FINAL_EVENTS and self.tail.endswith(b"\n\n")
        return self.tail.endswith(DONE)

    @property
    def partial(self) -> bool:
        """The stream stopped inside an event (no blank line after its last bytes)."""
        return not self.tail.endswith(b"\n\n")
