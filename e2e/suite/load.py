"""Load through a router with the official ``openai`` client, as a user's load generator
sends it. Does HTTP I/O (in a thread of its own, so the test keeps watching the cluster).

A trace (Azure CSV or JSONL, ``tandem.traces``) is replayed at ``rate_scale`` times its
rate: each row is one completion with a prompt of its prompt tokens and ``max_tokens``
its output tokens. Prompts are text (``prompt_text``): the client spends ~0.6 s of CPU
turning one 7,000-token *list* of token ids into a request body, which would make the
load generator, not the fleet, the bottleneck. Every replay is bounded twice: by a
number of requests and by a deadline, after which requests still in flight get
``grace_s`` to finish and are then cancelled (and counted as cut, not as failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from openai import AsyncOpenAI

from tandem.traces import TraceRequest, parse_trace, scale_rate

REPO = Path(__file__).resolve().parent.parent.parent
CONVERSATION_TRACE = REPO / "examples" / "traces" / "azure-conv-head.csv"


def prompt_text(index: int, tokens: int) -> str:
    """A prompt the simulated engine counts as ``tokens`` tokens (it counts UTF-8 bytes / 4;
    a real tokenizer counts differently), unique from its first block on (``index``), so
    prefix caching shares nothing between two requests.

    >>> len(prompt_text(7, 1000).encode()) == 4 * 1000
    True
    >>> prompt_text(1, 64)[:16] != prompt_text(2, 64)[:16]
    True
    """
    head = f"{index:010d}: "
    body = head + "summarize this paragraph of the document please. " * (tokens // 12 + 1)
    return body[: 4 * tokens]


def load_trace(path: Path = CONVERSATION_TRACE) -> list[TraceRequest]:
    return parse_trace(path.read_text(), path.name)


def with_bursts(
    arrivals: list[TraceRequest],
    *,
    every_s: float,
    size: int,
    prompt_tokens: int,
    output_tokens: int,
    until_s: float,
) -> list[TraceRequest]:
    """``arrivals`` plus a burst of ``size`` long prompts every ``every_s`` seconds (from
    0 until ``until_s``), as a batch job that summarizes documents lands on a chat
    service: what the prefill pool must absorb.

    >>> mixed = with_bursts([TraceRequest(1.0, 10, 5)], every_s=2, size=2,
    ...                     prompt_tokens=700, output_tokens=3, until_s=3)
    >>> [(r.arrival_s, r.prompt_tokens) for r in mixed]
    [(0.0, 700), (0.0, 700), (1.0, 10), (2.0, 700), (2.0, 700)]
    """
    bursts = [
        TraceRequest(float(k * every_s), prompt_tokens, output_tokens)
        for k in range(int(until_s // every_s) + 1)
        if k * every_s < until_s
        for _ in range(size)
    ]
    return sorted([*arrivals, *bursts], key=lambda r: r.arrival_s)


@dataclass
class LoadResult:
    """What one replay did."""

    sent: int = 0
    ok: int = 0
    cut: int = 0
    """Still running at the deadline plus grace, cancelled by the load generator."""
    failures: list[str] = field(default_factory=list)
    """One line per failed request: when (seconds into the replay) and the error."""
    completion_tokens: int = 0

    @property
    def failed(self) -> int:
        return len(self.failures)

    def summary(self) -> str:
        kinds = Counter(f.split(": ", 1)[-1][:80] for f in self.failures)
        return (
            f"{self.sent} sent, {self.ok} ok, {self.failed} failed, {self.cut} cut, "
            f"{self.completion_tokens} tokens; failures: {dict(kinds)}"
        )


async def _replay(
    base_url: str,
    model: str,
    trace: list[TraceRequest],
    *,
    max_requests: int,
    duration_s: float,
    grace_s: float,
    stop: threading.Event,
    result: LoadResult,
) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300)
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()

    async def one(index: int, req: TraceRequest) -> None:
        at = time.monotonic() - start
        try:
            answer = await client.completions.create(
                model=model,
                prompt=prompt_text(index, req.prompt_tokens),
                max_tokens=req.output_tokens,
            )
        except asyncio.CancelledError:
            result.cut += 1
            raise
        except Exception as err:
            result.failures.append(f"t={at:.1f}s: {type(err).__name__}: {err}")
            return
        result.ok += 1
        if answer.usage is not None:
            result.completion_tokens += answer.usage.completion_tokens

    try:
        for index, req in enumerate(trace[:max_requests]):
            delay = start + req.arrival_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if stop.is_set() or time.monotonic() - start > duration_s:
                break
            result.sent += 1
            task = asyncio.create_task(one(index, req))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=grace_s)
    finally:
        for task in list(tasks):
            task.cancel()
        for task in list(tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await client.close()


def at_rate(trace: list[TraceRequest], rate_scale: float) -> list[TraceRequest]:
    """The trace's arrivals at ``rate_scale`` times its rate."""
    return scale_rate(trace, rate_scale)


class Load:
    """Arrivals (``at_rate``, ``with_bursts``) replayed in a thread of its own: ``start``,
    then ``finish`` (or ``stop``)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        arrivals: list[TraceRequest],
        *,
        max_requests: int,
        duration_s: float,
        grace_s: float = 60.0,
    ) -> None:
        self.result = LoadResult()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(
                _replay(
                    base_url,
                    model,
                    arrivals,
                    max_requests=max_requests,
                    duration_s=duration_s,
                    grace_s=grace_s,
                    stop=self._stop,
                    result=self.result,
                ),
            ),
            name="load",
            daemon=True,
        )
        self._bound_s = duration_s + grace_s + 30

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> LoadResult:
        """Send no more; wait for the requests in flight (bounded), then the result."""
        self._stop.set()
        return self.finish()

    def finish(self) -> LoadResult:
        self._thread.join(timeout=self._bound_s)
        if self._thread.is_alive():
            raise AssertionError(f"the load did not end within {self._bound_s:.0f} s")
        return self.result
