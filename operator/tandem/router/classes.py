"""Priority classes: which class a request belongs to, and admission per class. Pure.

A request names its class in one header (``RouterConfig.priority_header``); no header
means the default class, an unknown name is the client's error. A class that requires a
key (``ClassConfig.require_key``) is granted only to a request whose API key lists it
(:mod:`tandem.router.keys`): anyone can send a header, so without keys a client could
give itself the best class. A request with a key and no header gets the first class its
key grants. Admission is a pair of counters checked before any engine is contacted: the
router-wide bound and the class's own bound. Over either, the request is rejected at
once (429 with ``Retry-After``) rather than queued, so a burst never builds an unbounded
queue inside the router.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tandem.router.config import ClassConfig, RouterConfig

#: Rejection reasons (the ``reason`` label of ``tandem_router_rejections_total``).
REASON_MAX_INFLIGHT = "max_inflight"
REASON_CLASS_MAX_INFLIGHT = "class_max_inflight"
REASON_UNKNOWN_CLASS = "unknown_class"
REASON_BODY_TOO_LARGE = "body_too_large"
REASON_BODY_TIMEOUT = "body_timeout"
REASON_NO_ENDPOINT = "no_endpoint"
REASON_CLASS_KEY = "class_key"
"""A class that requires a key, named without one that grants it (401 or 403)."""


@dataclass(frozen=True)
class UnknownClass:
    """A class header naming no declared class."""

    given: str
    valid: tuple[str, ...]

    @property
    def message(self) -> str:
        return f"unknown priority class {self.given!r}; valid classes: {', '.join(self.valid)}"


@dataclass(frozen=True)
class ClassDenied:
    """A class that requires a key the request did not present."""

    name: str
    keyed: bool
    """The request had a valid key, just not one for this class."""

    @property
    def status(self) -> int:
        """403 for a key that does not grant the class; 401 for no (valid) key."""
        return 403 if self.keyed else 401

    @property
    def message(self) -> str:
        if self.keyed:
            return f"this API key does not grant priority class {self.name!r}"
        return (
            f"priority class {self.name!r} requires an API key "
            "(Authorization: Bearer KEY) that grants it"
        )


def resolve_class(
    header_value: str | None, config: RouterConfig, granted: frozenset[str] = frozenset()
) -> ClassConfig | UnknownClass | ClassDenied:
    """The class a request's header value selects (``None``: header absent), given the
    classes its API key ``granted``.

    >>> from tandem.router.config import ClassConfig, RouterConfig
    >>> resolve_class(None, RouterConfig()).name
    'default'
    >>> gold = RouterConfig(classes=(ClassConfig("std"), ClassConfig("gold", require_key=True)),
    ...                     default_class="std")
    >>> resolve_class("gold", gold)
    ClassDenied(name='gold', keyed=False)
    >>> resolve_class("gold", gold, frozenset({"gold"})).name, resolve_class(None, gold).name
    ('gold', 'std')
    >>> resolve_class(None, gold, frozenset({"gold"})).name  # the key picks its class
    'gold'
    """
    if header_value is None and granted:
        for declared in config.classes:
            if declared.name in granted:
                return declared
    name = config.default_class if header_value is None else header_value.strip()
    klass = config.class_named(name)
    if klass is None and header_value is not None and not name:
        klass = config.class_named(config.default_class)
    if klass is None:
        return UnknownClass(given=name, valid=tuple(config.class_names()))
    if klass.require_key and klass.name not in granted:
        return ClassDenied(klass.name, keyed=bool(granted))
    return klass


class Admission:
    """In-flight counters, total and per class; the router's only admission state.

    ``try_admit`` and ``release`` must pair up: the caller releases in a ``finally``.
    Limits are read from the config passed in, so a changed InferenceService applies to
    the next request without touching requests already admitted.
    """

    def __init__(self) -> None:
        self.total = 0
        self.by_class: Counter[str] = Counter()

    def try_admit(self, klass: ClassConfig, config: RouterConfig) -> str | None:
        """Admit one request of ``klass``; return the rejection reason instead when full."""
        if self.total >= config.max_inflight:
            return REASON_MAX_INFLIGHT
        if klass.max_inflight is not None and self.by_class[klass.name] >= klass.max_inflight:
            return REASON_CLASS_MAX_INFLIGHT
        self.total += 1
        self.by_class[klass.name] += 1
        return None

    def release(self, klass: ClassConfig) -> None:
        self.total -= 1
        self.by_class[klass.name] -= 1
