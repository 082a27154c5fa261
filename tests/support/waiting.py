"""Waiting for a condition in component tests, with a message that says what never came."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], T],
    *,
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
    what: str = "the condition",
) -> T:
    """Poll ``check`` until it returns something truthy; return it, or fail after
    ``timeout_s`` seconds with the last value seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g}s waiting for {what}; last seen: {value!r}"
            )
        await asyncio.sleep(interval_s)


async def stays(
    check: Callable[[], object],
    *,
    for_s: float,
    interval_s: float = 0.05,
    what: str = "the condition",
) -> None:
    """Fail if ``check`` ever turns falsy during ``for_s`` seconds."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        value = check()
        if not value:
            raise AssertionError(f"{what} stopped holding: {value!r}")
        await asyncio.sleep(interval_s)
