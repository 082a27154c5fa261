"""Fault injection for the emulated Kubernetes API: failed writes, conflicts, slow answers.

No I/O of its own: the emulator asks :meth:`FaultInjector.pick` before serving each object
request and answers with the chosen fault instead of touching any state — exactly what a
client sees when an API server answers 500/503, when an admission layer or a concurrent
writer causes a 409, or when a request times out. Cutting watch streams lives on the
emulator (:meth:`tests.support.kube_emulator.Emulator.cut_watches`) because it acts on
open connections.

Faults are drawn from a seeded generator, so a failing test replays the same faults.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

_REASONS = {
    409: (
        "Conflict",
        "Operation cannot be fulfilled: the object has been modified; "
        "please apply your changes to the latest version and try again",
    ),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}


@dataclasses.dataclass
class FaultRule:
    """Fail a share of the matching requests.

    ``status`` is the HTTP code answered (409, 429, 500, 503, 504) without applying the
    request. ``delay_s`` (seconds) answers that late, for client-side timeouts.
    ``lost_reply`` instead applies the request normally and delays only the answer — the
    write happened, but a client that timed out does not know it. ``share`` is the
    probability per matching request (0..1); ``limit`` caps how many faults the rule
    injects (``None``: unlimited).
    """

    status: int = 500
    share: float = 1.0
    methods: Collection[str] = WRITE_METHODS
    plurals: Collection[str] | None = None
    subresources: Collection[str | None] | None = None
    delay_s: float = 0.0
    lost_reply: bool = False
    limit: int | None = None
    injected: int = 0

    def matches(self, method: str, plural: str, subresource: str | None) -> bool:
        if self.limit is not None and self.injected >= self.limit:
            return False
        if method.upper() not in self.methods:
            return False
        if self.plurals is not None and plural not in self.plurals:
            return False
        return self.subresources is None or subresource in self.subresources


@dataclasses.dataclass(frozen=True)
class Fault:
    """One injected fault, as recorded in :attr:`FaultInjector.log`."""

    method: str
    path: str
    status: int
    delay_s: float
    lost_reply: bool = False

    @property
    def reason(self) -> str:
        return _REASONS.get(self.status, ("InternalError", ""))[0]

    @property
    def message(self) -> str:
        return _REASONS.get(self.status, ("", "injected fault"))[1]


class FaultInjector:
    """Rules checked in order; the first matching rule whose draw hits injects a fault."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self.rules: list[FaultRule] = []
        self.log: list[Fault] = []

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def fail_writes(self, share: float, status: int = 500, **kwargs: object) -> FaultRule:
        """Shortcut: answer ``status`` to ``share`` of the writes (POST/PUT/PATCH/DELETE)."""
        return self.add(FaultRule(status=status, share=share, **kwargs))  # type: ignore[arg-type]

    def clear(self) -> None:
        self.rules.clear()

    def pick(self, method: str, path: str, plural: str, subresource: str | None) -> Fault | None:
        for rule in self.rules:
            if rule.matches(method, plural, subresource) and self._rng.random() < rule.share:
                rule.injected += 1
                fault = Fault(method.upper(), path, rule.status, rule.delay_s, rule.lost_reply)
                self.log.append(fault)
                return fault
        return None
