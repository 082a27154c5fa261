"""The router's settings as frozen dataclasses, and how they come from an InferenceService. Pure.

One :class:`RouterConfig` drives a router whether its pools come from command-line
flags (static mode) or from the Kubernetes API (cluster mode): in cluster mode it is
built from ``spec.router``, ``spec.qos`` and ``spec.engine`` by :func:`build_router_config`
and replaced whole when the resource changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from tandem.api import InferenceService
from tandem.policy.config import LatencyTargets, compute_policy_config

Mode = Literal["disaggregated", "aggregated"]

#: Name of the implicit class when the service declares no priority classes.
DEFAULT_CLASS = "default"


@dataclass(frozen=True)
class Timeouts:
    """Every wait the router does is bounded by one of these (seconds)."""

    connect_s: float = 5.0
    """Opening a TCP connection to an engine; also the longest wait for a ready decode
    (or aggregated) engine when that pool is empty."""
    prefill_s: float = 60.0
    """The whole prefill leg: request sent to response body read."""
    first_token_s: float = 120.0
    """From the decode request to its first byte. A non-streaming answer has no first
    byte until it is whole: its leg fails once the engine has shown no progress (token
    counters unchanged at its scrapes) for this long; while its scrapes fail, after
    ``idle_stream_s`` without progress."""
    idle_stream_s: float = 60.0
    """Longest silence between two chunks of a streaming answer; also the longest a
    streaming client may take no bytes before it is cut."""
    request_header_s: float = 10.0
    """From connect (or a later request's first byte) to the whole request head. Clients
    send a head in one packet; a slow one only holds a socket."""
    request_body_s: float = 30.0
    """From the request head to the whole body, read before admission, so a client that
    trickles its body holds no admission slot; beyond it: 408. (An 8 MiB body in 30 s
    needs 280 kB/s.)"""
    client_idle_s: float = 75.0
    """A keep-alive connection with no request is closed after this. Longer than the 60 s
    idle timeout of common load balancers, so they close first and never reuse a
    connection the router is closing."""


#: A class without latency targets: nothing is judged infeasible, nothing absorbed.
NO_TARGETS = LatencyTargets(None, 90, None, 90)


@dataclass(frozen=True)
class ClassConfig:
    """A priority class: the vLLM ``priority`` it sets and its admission limit."""

    name: str
    priority: int = 0
    """vLLM request priority (lower runs first); sent only under the priority policy."""
    max_inflight: int | None = None
    """In-flight requests of this class per router replica; ``None``: only the global bound."""
    require_key: bool = False
    """Granted only to requests whose API key lists the class (``--class-keys``)."""
    targets: LatencyTargets = NO_TARGETS
    """The class's TTFT and ITL targets, for the router's accounting (which requests no
    pool size could serve in time) and for absorbing prefill bursts on decode engines."""


@dataclass(frozen=True)
class RouterConfig:
    """Everything that changes how the router treats a request."""

    mode: Mode = "disaggregated"
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_inflight: int = 1024
    """In-flight requests per router replica, all classes together; beyond it: 429."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest request body accepted; beyond it: 413."""
    max_connections_per_client: int = 1024
    """Open connections per client address. Beyond it the address's oldest connection
    without a request in progress is closed, or the new one if all are busy. As many as
    ``max_inflight``, so one address (an ingress, a NAT, a batch client) can still use a
    replica's whole admission but not hold sockets without bound."""
    priority_header: str = "x-tandem-priority-class"
    """Request header naming the priority class (matched case-insensitively)."""
    classes: tuple[ClassConfig, ...] = (ClassConfig(DEFAULT_CLASS),)
    """Priority classes; never empty."""
    default_class: str = DEFAULT_CLASS
    """Class of requests that carry no class header."""
    send_priority: bool = False
    """Set vLLM's ``priority`` field; only when engines run ``--scheduling-policy priority``."""
    short_prompt_tokens: int = 0
    """Prompts estimated shorter than this skip the prefill leg (0: never skip)."""
    prefix_affinity_tokens: int = 64
    """Leading prompt tokens hashed for prefill prefix affinity (0: no affinity).

    64 tokens are four 16-token KV blocks: enough to tell system prompts apart, short
    enough that two requests sharing a system prompt land on the same prefill engine."""
    retry_after_s: int = 1
    """``Retry-After`` sent with a 429 (whole seconds, as HTTP requires)."""
    scrape_interval_s: float = 1.0
    """How often each engine's ``/metrics`` is scraped for selection."""
    model_name: str | None = None
    """Served model name, when known (cluster mode); only used in messages."""
    prefill_tokens_per_s: float | None = None
    """Declared prompt tokens/s of one replica of the first pool (``profile.
    prefillTokensPerS``): a floor of every prompt's least TTFT from the first request."""
    absorb_bursts: bool = True
    """Let decode engines prefill prompts the prefill pool would serve past their TTFT
    target (:func:`~tandem.router.selection.pick_absorber`); off, every prompt waits for
    the prefill pool. For comparisons (``bench/feasibility.py``)."""

    def class_named(self, name: str) -> ClassConfig | None:
        for klass in self.classes:
            if klass.name == name:
                return klass
        return None

    def class_names(self) -> list[str]:
        return [klass.name for klass in self.classes]


def build_router_config(isvc: InferenceService, base: RouterConfig | None = None) -> RouterConfig:
    """The router settings an InferenceService declares; unspecified knobs keep ``base``'s.

    Without priority classes the service gets one implicit ``default`` class with
    priority 0; ``defaultClass`` falls back to the first declared class.
    """
    spec = isvc.spec
    router = spec.router
    policy = compute_policy_config(isvc)
    declared = tuple(
        ClassConfig(
            name=c.name,
            priority=c.priority,
            max_inflight=c.max_inflight,
            require_key=c.require_key,
            targets=policy.class_targets.get(c.name, policy.targets),
        )
        for c in spec.qos.priority_classes
    )
    classes = declared or (ClassConfig(DEFAULT_CLASS, targets=policy.targets),)
    first = policy.pools.get("prefill") or policy.pools.get("pool")
    default = spec.qos.default_class or classes[0].name
    return replace(
        base or RouterConfig(),
        mode=spec.mode,
        timeouts=Timeouts(
            connect_s=router.timeouts.connect,
            prefill_s=router.timeouts.prefill,
            first_token_s=router.timeouts.first_token,
            idle_stream_s=router.timeouts.idle_stream,
            request_header_s=router.timeouts.request_header,
            request_body_s=router.timeouts.request_body,
            client_idle_s=router.timeouts.client_idle,
        ),
        max_inflight=router.max_inflight,
        max_body_bytes=router.max_body_bytes,
        max_connections_per_client=router.max_connections_per_client,
        priority_header=router.priority_header,
        classes=classes,
        default_class=default,
        send_priority=spec.engine.scheduling_policy == "priority",
        short_prompt_tokens=router.short_prompt_tokens,
        model_name=spec.model.name,
        prefill_tokens_per_s=first.prefill_tokens_per_s if first else None,
    )


def parse_class_flag(text: str) -> ClassConfig:
    """``NAME[:PRIORITY[:MAX_INFLIGHT]]`` (the ``--class`` flag) as a class.

    >>> klass = parse_class_flag("batch:10:64")
    >>> klass.name, klass.priority, klass.max_inflight
    ('batch', 10, 64)
    """
    parts = text.split(":")
    if not parts[0] or len(parts) > 3:
        raise ValueError(f"expected NAME[:PRIORITY[:MAX_INFLIGHT]], got {text!r}")
    try:
        priority = int(parts[1]) if len(parts) > 1 and parts[1] else 0
        limit = int(parts[2]) if len(parts) > 2 and parts[2] else None
    except ValueError:
        raise ValueError(f"priority and max in-flight must be integers in {text!r}") from None
    if limit is not None and limit < 1:
        raise ValueError(f"max in-flight must be >= 1 in {text!r}")
    return ClassConfig(name=parts[0], priority=priority, max_inflight=limit)
