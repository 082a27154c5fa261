"""Reading the apiserver's audit log: who did what. Reads a file; the counting is pure.

The log holds one JSON event per line, one per request (the policy omits the
RequestReceived stage; long-running watches also log ResponseStarted, counted once by
``auditID``). ``username`` is the identity the apiserver authenticated:
``system:serviceaccount:<ns>:<name>`` for pods and ServiceAccount kubeconfigs,
``system:node:<name>`` for the node agent, ``tandem-e2e-admin`` for the admin.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

Event = dict[str, Any]


def read_events(path: Path) -> Iterator[Event]:
    """Every complete event in the log, once per request (a line being written is skipped)."""
    seen: set[str] = set()
    with path.open() as f:
        for line in f:
            try:
                event: Event = json.loads(line)
            except json.JSONDecodeError:
                continue
            audit_id = str(event.get("auditID"))
            if audit_id in seen:
                continue
            seen.add(audit_id)
            yield event


def username(event: Event) -> str:
    return str(event.get("user", {}).get("username", ""))


def pod_of(event: Event) -> str | None:
    """The pod whose ServiceAccount token made the request (bound tokens name it), else None.

    >>> pod_of({"user": {"extra": {"authentication.kubernetes.io/pod-name": ["op-1"]}}})
    'op-1'
    >>> pod_of({"user": {"username": "tandem-e2e-admin"}}) is None
    True
    """
    names = event.get("user", {}).get("extra", {}).get("authentication.kubernetes.io/pod-name")
    return str(names[0]) if names else None


def code(event: Event) -> int:
    """The HTTP status of the answer (0 when none was recorded)."""
    return int(event.get("responseStatus", {}).get("code") or 0)


def is_write(event: Event) -> bool:
    return event.get("verb") in WRITE_VERBS


def writes_by_user(events: Iterable[Event]) -> Counter[str]:
    """Number of write requests per username.

    >>> writes_by_user([
    ...     {"auditID": "1", "verb": "create", "user": {"username": "a"}},
    ...     {"auditID": "2", "verb": "get", "user": {"username": "a"}},
    ...     {"auditID": "3", "verb": "patch", "user": {"username": "b"}},
    ... ])
    Counter({'a': 1, 'b': 1})
    """
    return Counter(username(e) for e in events if is_write(e))


def matching(
    events: Iterable[Event],
    *,
    user: str | None = None,
    verb: str | None = None,
    resource: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> list[Event]:
    """Events whose fields equal every criterion given (``subresource=""``: none)."""
    out = []
    for e in events:
        ref = e.get("objectRef", {})
        if subresource is not None and ref.get("subresource", "") != subresource:
            continue
        if user is not None and username(e) != user:
            continue
        if verb is not None and e.get("verb") != verb:
            continue
        if resource is not None and ref.get("resource") != resource:
            continue
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        if name is not None and ref.get("name") != name:
            continue
        out.append(e)
    return out
