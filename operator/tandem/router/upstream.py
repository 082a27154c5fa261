"""Requests to engines: one leg each, every wait bounded, failures classified. Does HTTP I/O.

A leg ends in one of three ways: the engine's answer (2xx), an answer to pass to the
client as is (:class:`Passthrough`: a 4xx is the client's problem, not the engine's),
or an :class:`UpstreamFailure` the proxy may retry. ``delivered`` on a failure says
whether the engine may have received the request, which decides whether the KV a
prefill engine holds can still be trusted for a retry. An engine that answers 503 or 429
is overloaded, not broken: the failure says so, with the engine's ``Retry-After``.

A failure carries two texts: ``reason``, which may reach the client, and ``detail``, for
the router's log only. Engine URLs and OS errors stay in the detail: in a cluster they
are pod IPs and socket internals, nothing a client should see.

Timing without a timer per chunk: :class:`StallGuard` keeps one deadline per stream,
moved forward by a plain attribute write per chunk; its single timer only cancels the
waiting task when the deadline really passed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tandem.router.engine_http import EngineAnswer, EngineClient, EngineConnectError

#: Statuses that mean "try elsewhere" even though they are 4xx.
RETRYABLE_4XX = frozenset({408, 429})
#: Statuses of an engine that is alive but has no room (vLLM answers 503 when its
#: ``--max-num-queued-reqs``/``--max-num-queued-tokens`` admission control refuses).
OVERLOAD_STATUSES = frozenset({429, 503})
#: Longest ``Retry-After`` passed on from an engine (seconds).
MAX_RETRY_AFTER_S = 3600

#: How often a guard re-reads a progress deadline once its own deadline has passed.
PROGRESS_RECHECK_S = 0.25


class UpstreamFailure(Exception):
    """A leg that failed in a way another engine might not.

    ``reason`` completes "the decode engine ..." for the client; ``detail`` names the
    engine and the low-level error for the log. ``status`` is what the client is
    answered if no retry succeeds: 504 for a timeout, the engine's 503 or 429 for an
    overload (with ``retry_after_s`` when the engine gave one), else 502.
    """

    def __init__(
        self,
        reason: str,
        *,
        detail: str,
        delivered: bool,
        status: int = 502,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.delivered = reason, detail, delivered
        self.status, self.retry_after_s = status, retry_after_s

    @property
    def timed_out(self) -> bool:
        return self.status == 504

    @property
    def overloaded(self) -> bool:
        return self.status in OVERLOAD_STATUSES


@dataclass(frozen=True)
class Passthrough:
    """An engine's non-retryable error answer, relayed to the client unchanged."""

    status: int
    body: bytes
    content_type: str


class StallTimeout(Exception):
    """A :class:`StallGuard` deadline passed."""


class StallGuard:
    """Cancels the current task when its deadline passes; ``touch`` moves the deadline.

    Starts with ``first_s`` (time to first byte); each :meth:`touch` sets the deadline to
    now plus ``idle_s``. ``progress``, when given, is a second deadline read once the
    first one passes (a non-streaming answer shows no bytes until it is whole, so its
    engine's progress stands in for them), then every :data:`PROGRESS_RECHECK_S`, as a
    scrape can bring it closer. Use as a context manager: a guard-made
    cancellation leaves it as :class:`StallTimeout`, any other cancellation (the client
    went away) passes through.
    """

    def __init__(
        self, first_s: float, idle_s: float, *, progress: Callable[[], float] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("StallGuard needs a running task")
        self._task = task
        self._idle_s = idle_s
        self._progress = progress
        self._started_s = self._loop.time()
        self.deadline = self._started_s + first_s
        self.expired = False
        self.waited_s = 0.0
        """Once expired: how long after the guard started the deadline that fired was."""
        self._handle: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        self.deadline = self._loop.time() + self._idle_s

    def __enter__(self) -> StallGuard:
        self._handle = self._loop.call_at(self.deadline, self._check)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if kind is asyncio.CancelledError and self.expired and self._task.uncancel() == 0:
            raise StallTimeout() from exc

    def _check(self) -> None:
        deadline = self.deadline
        if self._progress is not None:
            deadline = max(deadline, self._progress())
        now = self._loop.time()
        if now >= deadline:
            self.expired = True
            self.waited_s = deadline - self._started_s
            self._task.cancel()
            return
        if self._progress is not None and now >= self.deadline:
            deadline = min(deadline, now + PROGRESS_RECHECK_S)
        self._handle = self._loop.call_at(deadline, self._check)


def encode_body(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


async def post_json(
    engines: EngineClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    timeout_s: float,
    connect_timeout_s: float | None,
) -> bytes | Passthrough:
    """POST ``body`` and read the whole answer within ``timeout_s``.

    Returns the 2xx body or a :class:`Passthrough`; raises :class:`UpstreamFailure`.
    An answer not read to its end closes its connection (the engine aborts the request).
    """
    answer: EngineAnswer | None = None
    try:
        async with asyncio.timeout(timeout_s):
            answer = await open_stream(
                engines, url, body, headers, connect_timeout_s=connect_timeout_s
            )
            raw = await answer.read()
            status = answer.status
            content_type = answer.headers.get("content-type", "application/json")
            retry_after = answer.headers.get("retry-after")
    except TimeoutError:
        raise UpstreamFailure(
            f"did not answer within {timeout_s:g} s",
            detail=f"no answer from {url} within {timeout_s:g} s",
            delivered=True,
            status=504,
        ) from None
    except OSError as err:
        raise transport_failure(url, err) from None
    finally:
        if answer is not None:
            answer.release()  # reused if read to the end, else closed
    return classify(url, status, raw, content_type, retry_after)


def classify(
    url: str, status: int, raw: bytes, content_type: str, retry_after: str | None = None
) -> bytes | Passthrough:
    """A complete answer as success, pass-through or retryable failure."""
    if 200 <= status < 300:
        return raw
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Passthrough(status, raw, content_type)
    detail = f"{url} answered {status}: {_snippet(raw)}"
    if status in OVERLOAD_STATUSES:
        raise UpstreamFailure(
            f"is overloaded (HTTP {status})",
            detail=detail,
            delivered=True,
            status=status,
            retry_after_s=parse_retry_after(retry_after),
        )
    raise UpstreamFailure(f"failed (HTTP {status})", detail=detail, delivered=True)


def parse_retry_after(value: str | None) -> int | None:
    """``Retry-After`` in whole seconds (the delay form), bounded; ``None`` if absent or
    an HTTP date, which engines do not send.

    >>> parse_retry_after("5"), parse_retry_after(" 99999 "), parse_retry_after("soon")
    (5, 3600, None)
    """
    if value is None or not value.strip().isdigit():
        return None
    return max(1, min(int(value.strip()), MAX_RETRY_AFTER_S))


def connect_failure(url: str, err: BaseException) -> UpstreamFailure:
    """The engine could not be reached: it never saw the request."""
    return UpstreamFailure(
        "could not be reached",
        detail=f"cannot connect to {url}: {err}",
        delivered=False,
    )


def transport_failure(url: str, err: BaseException) -> UpstreamFailure:
    """The connection failed after the request may have gone out."""
    if isinstance(err, EngineConnectError):
        return connect_failure(url, err)
    return UpstreamFailure(
        f"broke off the connection ({type(err).__name__})",
        detail=f"{url} failed: {type(err).__name__}: {err}",
        delivered=True,
    )


async def open_stream(
    engines: EngineClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    connect_timeout_s: float | None,
) -> EngineAnswer:
    """POST ``body`` and return the answer once its head arrives (time it with a
    :class:`StallGuard` around the call).

    The caller owns the answer and must ``close()`` it (which also tells the engine to
    abort, if the answer is not complete) or ``release()`` it once read to the end.
    """
    try:
        answer = await engines.post(
            url, encode_body(body), headers, connect_timeout_s=connect_timeout_s
        )
    except OSError as err:
        raise transport_failure(url, err) from None
    try:
        await answer.head()
    except OSError as err:
        answer.close()
        raise transport_failure(url, err) from None
    except BaseException:
        answer.close()
        raise
    return answer


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = raw[:limit].decode("utf-8", "replace").strip()
    return text + ("..." if len(raw) > limit else "")
