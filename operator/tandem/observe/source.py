"""What a metrics source is asked each tick, and the interface both sources share. Pure.

The driver (the operator's timer, the local fleet) lists each pool's pods and hands
them to a source: :class:`~tandem.observe.scrape.Scraper` reads every pod's
``/metrics`` itself, :class:`~tandem.observe.prometheus.PrometheusSource` asks a
Prometheus server for the same signals. Either way the answer is an
:class:`~tandem.observe.types.Observation`, so the policy cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation


@dataclass(frozen=True)
class PoolTargets:
    """One pool at this tick: the Deployment's replica counts and the pods to read."""

    replicas: int
    """Pods the Deployment has now (ready or starting)."""
    ready: int
    """Pods that are ready."""
    pods: Mapping[str, str] = field(default_factory=dict)
    """Pod name → its metrics URL (:func:`metrics_url`). Pass the ready pods: a vLLM pod
    that is still loading refuses connections and would be reported as failed."""


class ObservationSource(Protocol):
    """Anything that turns this tick's pods into an observation."""

    async def observe(
        self, pools: Mapping[PoolRole, PoolTargets], routers: Mapping[str, str] | None = None
    ) -> Observation:
        """``pools``: role → targets; ``routers``: router pod name → metrics URL."""
        ...


def metrics_url(host: str, port: int = 8000, path: str = "/metrics") -> str:
    """``http://host:port/metrics``, bracketing IPv6 addresses.

    >>> metrics_url("10.0.0.7"), metrics_url("fd00::7", 9000)
    ('http://10.0.0.7:8000/metrics', 'http://[fd00::7]:9000/metrics')
    """
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"
