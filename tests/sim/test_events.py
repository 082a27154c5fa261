"""The event loop: time order, ties in creation order, handlers return new events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tandem.sim.fleet.events import EventQueue, NewEvent


def test_events_fire_in_time_then_creation_order() -> None:
    q = EventQueue()
    seen: list[tuple[float, str]] = []

    def record(now: float, target: Any) -> Iterable[NewEvent]:
        seen.append((now, target))
        return [(now + 1.0, 1, target + "'")] if len(target) < 2 else ()

    for name in ("b", "a", "c"):
        q.push(2.0 if name != "a" else 1.0, 1, name)
    q.run({1: record})
    # a' is created while a fires, after b and c were pushed: it fires after them
    assert seen == [(1.0, "a"), (2.0, "b"), (2.0, "c"), (2.0, "a'"), (3.0, "b'"), (3.0, "c'")]
    assert q.now_s == 3.0 and q.fired == 6


def test_a_handler_cannot_go_back_in_time() -> None:
    q = EventQueue()
    q.push(5.0, 1, None)
    with pytest.raises(ValueError, match="before now"):
        q.run({1: lambda now, _: [(now - 1.0, 1, None)]})
    with pytest.raises(ValueError, match="before now"):
        q.push(1.0, 1, None)


def test_run_stops_at_the_limit() -> None:
    q = EventQueue()
    q.push(1.0, 1, None)
    q.push(10.0, 1, None)
    q.run({1: lambda now, _: ()}, until_s=5.0)
    assert q.fired == 1 and len(q) == 1 and q.peek_time_s() == 10.0
