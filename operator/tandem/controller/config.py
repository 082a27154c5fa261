"""The controller's settings as plain dataclasses: the Lease and Kopf's timeouts. No I/O.

Kept apart from the code that uses them (and imports Kopf and the API client) so the
command line can take its defaults from here at no import cost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True)
class KopfTuning:
    """Timeouts and backoffs of Kopf's API traffic (all in seconds)."""

    watch_server_timeout_s: float = 300.0
    """How long the API server keeps one watch request open (``timeoutSeconds``).

    Default 300. Kopf then re-watches from the last resourceVersion, losing nothing; a
    bounded stream means a connection a load balancer dropped silently is replaced within
    minutes instead of the API server's own 30-60."""

    watch_client_timeout_s: float = 360.0
    """Client-side limit of one watch request; a little above the server timeout so the
    server normally ends the stream cleanly. Default 360."""

    watch_inactivity_timeout_s: float = 420.0
    """Reconnect a watch that delivered nothing for this long. Default 420: above the
    server timeout, so quiet namespaces are not re-watched needlessly."""

    connect_timeout_s: float = 10.0
    """TCP and TLS connect timeout of Kopf's requests. Default 10."""

    request_timeout_s: float = 30.0
    """Whole-request timeout of Kopf's short requests (lists, discovery). Default 30."""

    reconnect_backoff_s: float = 0.1
    """Pause between two watch requests of one resource (Kopf's default)."""

    worker_idle_timeout_s: float = 5.0
    """Kopf keeps one worker per object with recent events; an idle one exits after
    this long, so memory follows activity rather than the number of children."""

    error_backoffs_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    """Retries of Kopf's own failed API requests (5xx, timeouts): five, over ~30 s."""

    log_level: int = logging.WARNING
    """Kopf's per-object log lines below this level are dropped (its ``on.event``
    handler lines would otherwise log every watch event at INFO)."""

    @classmethod
    def for_tests(cls) -> KopfTuning:
        """Short timeouts so component tests reconnect, retry and stop within seconds."""
        return cls(
            watch_server_timeout_s=5.0,
            watch_client_timeout_s=8.0,
            watch_inactivity_timeout_s=10.0,
            connect_timeout_s=2.0,
            request_timeout_s=5.0,
            reconnect_backoff_s=0.05,
            worker_idle_timeout_s=1.0,
            error_backoffs_s=(0.1, 0.2, 0.5, 1.0, 2.0),
        )


@dataclass(frozen=True)
class LeaseConfig:
    """Where the Lease lives, who we are, and its timing (seconds)."""

    identity: str
    name: str = "tandem-operator"
    namespace: str = "default"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "need retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / "
                f"{self.lease_duration_s}"
            )
