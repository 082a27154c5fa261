"""Object storage of the emulated API: versions, the event history, open watches.

No network I/O. Objects live in kmock's ``ObjectsArray`` (so ``emulator.objects[...]``
assertions keep working); this class adds the global ``resourceVersion`` counter
(etcd's revision), the history of watch events for ``?resourceVersion=`` replays, and
the fan-out of new events to open watches.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import kmock

from tests.support.kube_semantics import ApiError

Key = tuple[kmock.resource, str | None, str]
Event = tuple[str, Any, dict[str, Any]]  # (type, old object or None, new object)


def not_found(key: Key) -> ApiError:
    res, _, name = key
    what = f"{res.plural}.{res.group}" if res.group else str(res.plural)
    return ApiError(
        404, "NotFound", f'{what} "{name}" not found', name=name, group=res.group, kind=res.plural
    )


@dataclasses.dataclass(eq=False)
class Subscriber:
    """An open watch: where its events go. ``None`` in the queue ends the stream."""

    resource: kmock.resource
    queue: collections.deque[Event | None] = dataclasses.field(default_factory=collections.deque)
    wakeup: Any = None  # an asyncio.Event, set by the emulator's watch code
    abort: bool = False

    def push(self, item: Event | None) -> None:
        self.queue.append(item)
        if self.wakeup is not None:
            self.wakeup.set()


class Store:
    """Objects by (resource, namespace, name) and the ordered events that changed them."""

    def __init__(
        self, objects: kmock.ObjectsArray, *, keep_versions: bool, history_limit: int | None
    ) -> None:
        self.objects = objects
        self.keep_versions = keep_versions
        self.history_limit = history_limit
        self.revision = 0
        #: Events up to this revision are no longer replayable (410 Expired).
        self.floor = 0
        self.events: collections.deque[tuple[int, kmock.resource, str, Any, Any]] = (
            collections.deque()
        )
        self.subscribers: set[Subscriber] = set()

    def current(self, key: Key) -> dict[str, Any] | None:
        found = self.objects._objects.get(key)
        return None if found is None or found.deleted else found.raw

    def require(self, key: Key) -> dict[str, Any]:
        found = self.current(key)
        if found is None:
            raise not_found(key)
        return found

    def items(self, res: kmock.resource) -> Iterator[tuple[Key, dict[str, Any]]]:
        for key, found in self.objects.items():
            if key[0] == res and not found.deleted:
                yield key, found.raw

    def bump(self) -> str:
        self.revision += 1
        return str(self.revision)

    def add(self, key: Key, obj: dict[str, Any]) -> None:
        self._put(key, obj)
        self._publish(key[0], "ADDED", None, obj)

    def remove(self, key: Key, cur: dict[str, Any]) -> dict[str, Any]:
        gone = copy.deepcopy(cur)
        gone["metadata"]["resourceVersion"] = self.bump()
        self._put(key, None)
        self._publish(key[0], "DELETED", cur, gone)
        return gone

    def commit(self, key: Key, cur: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        """Store ``new`` over ``cur``; a write that changes nothing keeps the version and
        emits no event; dropping the last finalizer of a deleted object removes it."""
        if new == cur:
            return cur
        new["metadata"]["resourceVersion"] = self.bump()
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._put(key, None)
            self._publish(key[0], "DELETED", cur, new)
        else:
            self._put(key, new)
            self._publish(key[0], "MODIFIED", cur, new)
        return new

    def _put(self, key: Key, obj: dict[str, Any] | None) -> None:
        found = self.objects._objects.get(key)
        if found is None:
            if obj is not None:
                self.objects[key] = obj
        elif self.keep_versions:
            found.history.append(obj)
        else:
            found.history[:] = [obj]

    def _publish(self, res: kmock.resource, kind: str, old: Any, new: dict[str, Any]) -> None:
        self.events.append((self.revision, res, kind, old, new))
        while self.history_limit is not None and len(self.events) > self.history_limit:
            self.floor = self.events.popleft()[0]
        for sub in self.subscribers:
            if sub.resource == res:
                sub.push((kind, old, new))
