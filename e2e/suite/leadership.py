"""Who wrote while holding the operator's Lease, from the audit log. Pure.

Every operator replica runs under the same ServiceAccount, so the user name cannot tell
them apart; the token each pod gets is bound to it, and the API server records the pod
in ``user.extra`` (``cluster.audit.pod_of``). The holder of the Lease at any moment is
the last pod whose write to it succeeded (an acquisition or a renewal; a release is the
holder's own last write, after which it writes nothing more).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from cluster import audit

LEASE_VERBS = frozenset({"create", "update", "patch"})


@dataclass
class Leadership:
    """The writes of one identity's replicas, told apart by pod."""

    writes: Counter[str] = field(default_factory=Counter)
    """Pod → writes other than to the Lease."""
    lease_writes: Counter[str] = field(default_factory=Counter)
    """Pod → successful writes to the Lease (acquisitions and renewals)."""
    holders: list[str] = field(default_factory=list)
    """Pods in the order they took the Lease."""
    outside: list[audit.Event] = field(default_factory=list)
    """Writes made by a pod that did not hold the Lease at that moment."""


def compute_leadership(
    events: Iterable[audit.Event], *, user: str, lease_namespace: str, lease_name: str
) -> Leadership:
    """Replay ``user``'s requests in the order the API server received them.

    >>> def ev(t, pod, verb, resource, name="", code=200):
    ...     return {"auditID": t, "requestReceivedTimestamp": t, "verb": verb,
    ...             "user": {"username": "op", "extra":
    ...                      {"authentication.kubernetes.io/pod-name": [pod]}},
    ...             "objectRef": {"resource": resource, "namespace": "ns", "name": name},
    ...             "responseStatus": {"code": code}}
    >>> got = compute_leadership([
    ...     ev("t1", "a", "create", "leases", "lease", 201),
    ...     ev("t2", "b", "create", "leases", "lease", 409),
    ...     ev("t3", "a", "patch", "deployments"),
    ...     ev("t4", "b", "get", "deployments"),
    ...     ev("t5", "b", "update", "leases", "lease"),
    ...     ev("t6", "b", "create", "events"),
    ...     ev("t7", "a", "patch", "deployments"),
    ... ], user="op", lease_namespace="ns", lease_name="lease")
    >>> dict(got.writes), got.holders, [e["auditID"] for e in got.outside]
    ({'a': 2, 'b': 1}, ['a', 'b'], ['t7'])
    """
    mine = [e for e in events if audit.username(e) == user]
    mine.sort(key=lambda e: str(e.get("requestReceivedTimestamp", "")))
    out = Leadership()
    holder: str | None = None
    for event in mine:
        if not audit.is_write(event):
            continue
        pod = audit.pod_of(event) or "?"
        ref = event.get("objectRef", {})
        is_lease = (
            ref.get("resource") == "leases"
            and ref.get("namespace") == lease_namespace
            and ref.get("name") == lease_name
        )
        if is_lease:
            if event.get("verb") in LEASE_VERBS and 200 <= audit.code(event) < 300:
                out.lease_writes[pod] += 1
                if holder != pod:
                    out.holders.append(pod)
                holder = pod
            continue
        out.writes[pod] += 1
        if pod != holder:
            out.outside.append(event)
    return out
