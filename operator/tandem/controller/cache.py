"""The operator's view of the cluster: the latest version of each watched object. No I/O.

Filled from the watch streams (via Kopf) and from the answers to the operator's own
writes, so a reconcile that runs before the watch delivers its own change still sees it.
An older version never replaces a newer one: resourceVersions are opaque by contract,
but in every API server they are etcd revisions, so when both are integers the larger
is newer; otherwise the latest arrival wins.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

ObjectKey = tuple[str, str]
"""(namespace, name) of a namespaced object."""

K = TypeVar("K", bound=Hashable)
G = TypeVar("G", bound=Hashable)


def is_older(candidate: str | None, current: str | None) -> bool:
    """Whether resourceVersion ``candidate`` is known to be older than ``current``."""
    if candidate is None or current is None:
        return False
    if candidate.isdigit() and current.isdigit():
        return int(candidate) < int(current)
    return False


class ObjectCache(Generic[K, G]):
    """Objects by ``key(obj)``, grouped by ``group(obj)`` (e.g. by owning service)."""

    def __init__(
        self, key: Callable[[Mapping[str, Any]], K], group: Callable[[Mapping[str, Any]], G | None]
    ) -> None:
        self._key = key
        self._group = group
        self._objects: dict[K, dict[str, Any]] = {}
        self._groups: dict[G, set[K]] = {}
        self._written: set[K] = set()

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._objects))

    def get(self, key: K) -> dict[str, Any] | None:
        return self._objects.get(key)

    def observe(self, obj: Mapping[str, Any], *, written: bool = False) -> bool:
        """Store ``obj`` unless this or a newer version is known; True when stored.

        ``written``: ``obj`` is the answer to the operator's own write, so the watch event
        that echoes it later is no news (:meth:`is_echo`).
        """
        key = self._key(obj)
        old = self._objects.get(key)
        if old is not None and (is_older(_rv(obj), _rv(old)) or _rv(obj) == _rv(old)):
            return False
        if old is not None:
            self._ungroup(key, old)
        stored = dict(obj)
        self._objects[key] = stored
        if written:
            self._written.add(key)
        else:
            self._written.discard(key)
        group = self._group(stored)
        if group is not None:
            self._groups.setdefault(group, set()).add(key)
        return True

    def is_echo(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is exactly the version the operator itself wrote last."""
        key = self._key(obj)
        old = self._objects.get(key)
        return key in self._written and old is not None and _rv(old) == _rv(obj)

    def forget(self, obj: Mapping[str, Any]) -> None:
        """Drop ``obj`` unless a newer version is known (a late event of a recreated one)."""
        key = self._key(obj)
        old = self._objects.get(key)
        if old is None or is_older(_rv(obj), _rv(old)):
            return
        self._ungroup(key, old)
        del self._objects[key]
        self._written.discard(key)

    def in_group(self, group: G) -> list[dict[str, Any]]:
        return [self._objects[k] for k in sorted(self._groups.get(group, ()), key=repr)]

    def _ungroup(self, key: K, obj: Mapping[str, Any]) -> None:
        group = self._group(obj)
        if group is not None and group in self._groups:
            self._groups[group].discard(key)
            if not self._groups[group]:
                del self._groups[group]


def _rv(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return None if value is None else str(value)
