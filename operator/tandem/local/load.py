"""Replay a trace against the local router: one streaming completion per trace row. Does I/O.

Each request is sent at its trace time divided by the rate scale, with a prompt of
exactly the trace's prompt tokens and ``max_tokens`` set to the trace's output tokens
(both shortened to fit ``model.maxModelLen`` when they do not, :func:`fit_to_context`).
The prompt is token ids (so every engine counts them exactly), drawn at random per
request (:func:`build_prompt`), so that no two requests share a prefix the engines'
prefix caches would serve for free. Every request's tokens are timed as they arrive
(:class:`~tandem.local.summary.RequestRecord`). Sending stops at the duration; the
requests still in flight get a grace period, then are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tandem.local.summary import RequestRecord
from tandem.traces.parse import TraceRequest

#: Token ids the prompts are drawn from: inside the vocabulary of any model of at least
#: 500 tokens (the tiny test model has 512), above the few special tokens at the start.
PROMPT_TOKEN_IDS = range(10, 500)
#: Seconds a client waits for the next bytes of its answer before it gives up.
READ_TIMEOUT_S = 120.0


@dataclass
class LoadStats:
    """Every request sent so far, and how many of the trace were shortened to fit."""

    records: list[RequestRecord] = field(default_factory=list)
    fitted: int = 0
    planned: int = 0
    """Requests of the trace within the duration (what the progress bar counts to)."""

    @property
    def sent(self) -> int:
        return len(self.records)

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.served)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if r.error is not None)


def fit_to_context(prompt: int, output: int, max_len: int | None) -> tuple[int, int]:
    """Prompt and output tokens shortened to fit a context of ``max_len`` tokens: the
    output keeps at most half of it, the prompt what is left.

    >>> fit_to_context(1000, 200, 4096), fit_to_context(5000, 200, 4096)
    ((1000, 200), (3896, 200))
    >>> fit_to_context(3000, 3000, 4096), fit_to_context(10, 10, None)
    ((2048, 2048), (10, 10))
    """
    if max_len is None or prompt + output <= max_len:
        return prompt, output
    output = max(1, min(output, max_len // 2))
    return max(1, min(prompt, max_len - output)), output


def build_prompt(index: int, tokens: int) -> list[int]:
    """``tokens`` token ids for the request at ``index`` (the same for the same index).

    >>> build_prompt(3, 4) == build_prompt(3, 4), build_prompt(3, 16) == build_prompt(4, 16)
    (True, False)
    """
    draw = random.Random(index)
    return draw.choices(PROMPT_TOKEN_IDS, k=tokens)


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt: list[int],
    record: RequestRecord,
    clock: Callable[[], float],
) -> None:
    body = {"model": model, "prompt": prompt, "max_tokens": record.max_tokens, "stream": True}
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                record.error = f"HTTP {resp.status}"
                await resp.read()
                return
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    _read_event(json.loads(line[6:]), record, clock())
        if record.error is None and record.finish_reason is None:
            record.error = "stream ended early"
    except TimeoutError:  # aiohttp's ServerTimeoutError is one too
        record.error = f"no answer for {READ_TIMEOUT_S:g}s"
    except (aiohttp.ClientError, RuntimeError):
        # RuntimeError: aiohttp's "Connection closed" when an engine or the router stops.
        record.error = "connection closed"
    except ValueError:
        record.error = "bad event"  # not JSON


def _read_event(event: Any, record: RequestRecord, now_s: float) -> None:
    """One SSE event of a completions stream: a token, the finish, or an error (a stream
    the router or the engine cut: an ``error`` event, then ``[DONE]``)."""
    if not isinstance(event, dict) or "error" in event:
        record.error = "stream cut"
        return
    for choice in event.get("choices") or []:
        if choice.get("text"):
            record.token_s.append(now_s)
        if choice.get("finish_reason"):
            record.finish_reason = str(choice["finish_reason"])


async def replay_trace(
    url: str,
    model: str,
    trace: Sequence[TraceRequest],
    rate_scale: float,
    duration_s: float,
    clock: Callable[[], float],
    max_model_len: int | None = None,
    grace_s: float = 30.0,
    stats: LoadStats | None = None,
) -> LoadStats:
    """Send ``trace`` (times divided by ``rate_scale``) for ``duration_s`` seconds from
    now, recording into ``stats`` (watch it while this runs)."""
    stats = stats or LoadStats()
    stats.planned = sum(1 for r in trace if r.arrival_s / rate_scale <= duration_s)
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=READ_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        start = clock()
        for index, req in enumerate(trace):
            at = req.arrival_s / rate_scale
            if at > duration_s:
                break
            delay = start + at - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            prompt, output = fit_to_context(req.prompt_tokens, req.output_tokens, max_model_len)
            stats.fitted += (prompt, output) != (req.prompt_tokens, req.output_tokens)
            record = RequestRecord(sent_s=clock(), prompt_tokens=prompt, max_tokens=output)
            stats.records.append(record)
            task = asyncio.create_task(
                _one(session, url, model, build_prompt(index, prompt), record, clock)
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        remaining = start + duration_s - clock()
        if remaining > 0:
            await asyncio.sleep(remaining)
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
    return stats
