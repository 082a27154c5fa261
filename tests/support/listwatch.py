"""What a :class:`~tandem.kube.watch.ListWatch` hands over, recorded for the watch tests
on the emulator (tests/kube) and on the real API server (e2e). No I/O."""

from __future__ import annotations

from typing import Any


class Seen:
    """What a ListWatch handed over: the latest list, then every event."""

    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def on_list(self, items: list[dict[str, Any]]) -> None:
        self.lists.append(sorted(i["metadata"]["name"] for i in items))

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"]))
