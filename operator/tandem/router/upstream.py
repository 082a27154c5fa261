"""Requests to engines: one leg each, every wait bounded, failures classified. Does HTTP I/O.

A leg ends in one of three ways: the engine's answer (2xx), an answer to pass to the
client as is (:class:`Passthrough`: a 4xx is the client's problem, not the engine's),
or an :class:`UpstreamFailure` the proxy may retry. ``delivered`` on a failure says
whether the engine may have received the request, which decides whether the KV a
prefill engine holds can still be trusted for a retry.

Timing without a timer per chunk: :class:`StallGuard` keeps one deadline per stream,
moved forward by a plain attribute write per chunk; its single timer only cancels the
waiting task when the deadline really passed.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

#: Statuses that mean "try elsewhere" even though they are 4xx.
RETRYABLE_4XX = frozenset({408, 429})


class UpstreamFailure(Exception):
    """A leg that failed in a way another engine might not."""

    def __init__(self, message: str, *, delivered: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.message, self.delivered, self.timed_out = message, delivered, timed_out

    @property
    def status(self) -> int:
        """What the client is answered if no retry succeeds: 504 for a timeout, else 502."""
        return 504 if self.timed_out else 502


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
    now plus ``idle_s``. Use as a context manager: a guard-made cancellation leaves it as
    :class:`StallTimeout`, any other cancellation (the client went away) passes through.
    """

    def __init__(self, first_s: float, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("StallGuard needs a running task")
        self._task = task
        self._idle_s = idle_s
        self.deadline = self._loop.time() + first_s
        self.expired = False
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
        if self._loop.time() >= self.deadline:
            self.expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(self.deadline, self._check)


def encode_body(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    timeout_s: float,
    client_timeout: aiohttp.ClientTimeout,
) -> bytes | Passthrough:
    """POST ``body`` and read the whole answer within ``timeout_s``.

    Returns the 2xx body or a :class:`Passthrough`; raises :class:`UpstreamFailure`.
    """
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(
                url, data=encode_body(body), headers=headers, timeout=client_timeout
            ) as resp,
        ):
            raw = await resp.read()
            status = resp.status
            content_type = resp.headers.get("Content-Type", "application/json")
    except TimeoutError as err:
        connecting = isinstance(err, aiohttp.ConnectionTimeoutError)
        raise UpstreamFailure(
            f"no answer from {url} within {timeout_s:g} s", delivered=not connecting, timed_out=True
        ) from None
    except aiohttp.ClientConnectorError as err:
        raise UpstreamFailure(f"cannot connect to {url}: {err.os_error}", delivered=False) from None
    except (aiohttp.ClientError, OSError) as err:
        raise UpstreamFailure(
            f"{url} failed: {type(err).__name__}: {err}", delivered=True
        ) from None
    return classify(url, status, raw, content_type)


def classify(url: str, status: int, raw: bytes, content_type: str) -> bytes | Passthrough:
    """A complete answer as success, pass-through or retryable failure."""
    if 200 <= status < 300:
        return raw
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Passthrough(status, raw, content_type)
    raise UpstreamFailure(f"{url} answered {status}: {_snippet(raw)}", delivered=True)


async def open_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    guard: StallGuard,
    *,
    client_timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """POST ``body`` and return the open response once its head arrives (guarded).

    The caller owns the response and must ``close()`` it (which also tells the engine
    to abort, if the answer is not complete) or read it to the end.
    """
    try:
        return await session.post(
            url, data=encode_body(body), headers=headers, timeout=client_timeout
        )
    except aiohttp.ConnectionTimeoutError:
        raise UpstreamFailure(f"cannot connect to {url} (timeout)", delivered=False) from None
    except aiohttp.ClientConnectorError as err:
        raise UpstreamFailure(f"cannot connect to {url}: {err.os_error}", delivered=False) from None
    except (aiohttp.ClientError, OSError) as err:
        raise UpstreamFailure(
            f"{url} failed: {type(err).__name__}: {err}", delivered=True
        ) from None


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = raw[:limit].decode("utf-8", "replace").strip()
    return text + ("..." if len(raw) > limit else "")
