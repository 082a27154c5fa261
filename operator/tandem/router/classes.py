"""Priority classes: which class a request belongs to, and admission per class. Pure.

A request names its class in one header (``RouterConfig.priority_header``); no header
means the default class, an unknown name is the client's error. Admission is a pair of
counters checked before any engine is contacted: the router-wide bound and the class's
own bound. Over either, the request is rejected at once (429 with ``Retry-After``)
rather than queued, so a burst never builds an unbounded queue inside the router.
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


@dataclass(frozen=True)
class UnknownClass:
    """A class header naming no declared class."""

    given: str
    valid: tuple[str, ...]

    @property
    def message(self) -> str:
        return f"unknown priority class {self.given!r}; valid classes: {', '.join(self.valid)}"


def resolve_class(header_value: str | None, config: RouterConfig) -> ClassConfig | UnknownClass:
    """The class a request's header value selects (``None``: header absent).

    >>> from tandem.router.config import RouterConfig
    >>> resolve_class(None, RouterConfig()).name
    'default'
    """
    name = config.default_class if header_value is None else header_value.strip()
    klass = config.class_named(name)
    if klass is None and header_value is not None and not name:
        klass = config.class_named(config.default_class)
    if klass is None:
        return UnknownClass(given=name, valid=tuple(config.class_names()))
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
