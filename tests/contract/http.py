"""HTTP helpers of the contract tests: one call, its status and body (SSE split into
events), metrics pages. I/O on loopback; every call is bounded in time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.contract.fleet import Engine
from tests.vllm.engines import SERVED_NAME
from tests.vllm.survey import metric_sum

__all__ = ["Answer", "call", "chat_body", "completion_body", "metric_sum", "metrics_of"]

TIMEOUT_S = 120.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any = None
    """The JSON body (or the text when it is not JSON)."""
    events: list[Any] = field(default_factory=list)
    """SSE: each ``data:`` payload, JSON-decoded, the last one ``"[DONE]"`` (completions
    and chat)."""
    event_names: list[str | None] = field(default_factory=list)
    """SSE: each event's ``event:`` name (the Responses API names them), None when absent."""

    @property
    def error(self) -> dict[str, Any]:
        assert isinstance(self.body, dict) and "error" in self.body, self.body
        err: dict[str, Any] = self.body["error"]
        return err

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON events of a stream (without ``[DONE]``)."""
        return [e for e in self.events if isinstance(e, dict)]


async def call(
    engine: Engine | str,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Answer:
    url = engine if isinstance(engine, str) else engine.url
    kwargs: dict[str, Any] = {"headers": dict(headers or {})}
    if isinstance(body, bytes):
        kwargs["data"] = body
        kwargs["headers"]["Content-Type"] = "application/json"
    elif body is not None:
        kwargs["json"] = body
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, url + path, timeout=aiohttp.ClientTimeout(total=timeout_s), **kwargs
        ) as resp,
    ):
        raw = (await resp.read()).decode(errors="replace")
        answer = Answer(resp.status, dict(resp.headers))
    if answer.headers.get("Content-Type", "").startswith("text/event-stream"):
        for event in raw.split("\n\n"):
            if not event.strip():
                continue
            name, data = None, ""
            for line in event.strip().splitlines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = line.removeprefix("data: ")
            answer.event_names.append(name)
            answer.events.append(data if data == "[DONE]" else json.loads(data))
        return answer
    try:
        answer.body = json.loads(raw) if raw else raw
    except ValueError:
        answer.body = raw
    return answer


def completion_body(prompt: Any = "Hello there", **fields: Any) -> dict[str, Any]:
    return {"model": SERVED_NAME, "prompt": prompt, **fields}


def chat_body(content: str = "Hello there", **fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    return {"model": SERVED_NAME, "messages": messages, **fields}


async def metrics_of(engine: Engine) -> str:
    answer = await call(engine, "/metrics", method="GET")
    assert answer.status == 200
    assert isinstance(answer.body, str)
    return answer.body
