"""The Kopf settings Tandem runs with, each chosen on purpose. No I/O.

Tandem uses Kopf for what it is good at — listing and watching (with reconnects from the
last resourceVersion), per-object event serialization, credentials, liveness — and only
through ``@kopf.on.event`` and ``@kopf.index`` handlers. Those store nothing on the
objects: no finalizers (children are garbage-collected through their controller
ownerReferences, and nothing must run before an InferenceService goes away), no
``last-handled-configuration`` annotations, no progress annotations. So Kopf itself never
writes to the API; every write is the reconciler's and is counted in its metrics.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import kopf

from tandem.kube import ResourceType


@dataclasses.dataclass(frozen=True)
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


def build_settings(
    tuning: KopfTuning, label_selectors: Mapping[ResourceType, str] | None = None
) -> kopf.OperatorSettings:
    """``kopf.OperatorSettings`` for ``tuning``, with the fixed choices below.

    ``label_selectors``: the server-side selector each watched resource type is listed
    and watched with (the operator's children: only those it manages, so its memory
    follows its own objects, not every Deployment in the cluster)."""
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = tuning.watch_server_timeout_s
    settings.watching.client_timeout = tuning.watch_client_timeout_s
    settings.watching.inactivity_timeout = tuning.watch_inactivity_timeout_s
    settings.watching.connect_timeout = tuning.connect_timeout_s
    settings.watching.reconnect_backoff = tuning.reconnect_backoff_s
    for rtype, selector in (label_selectors or {}).items():
        settings.watching.label_selectors[rtype.group, rtype.version, rtype.plural] = selector
    settings.networking.request_timeout = tuning.request_timeout_s
    settings.networking.connect_timeout = tuning.connect_timeout_s
    settings.networking.error_backoffs = tuning.error_backoffs_s
    settings.queueing.idle_timeout = tuning.worker_idle_timeout_s
    # Events are posted by tandem.controller.events (deduplicated, counted); Kopf posts none.
    settings.posting.enabled = False
    # High availability is a Lease (tandem.controller.leadership): Kopf peering pauses every
    # operator of equal priority, so two replicas of one Deployment would both stop.
    settings.peering.standalone = True
    settings.peering.mandatory = False
    # No handler needs a finalizer or stored progress; should one ever, its marks carry
    # Tandem's name rather than Kopf's.
    settings.persistence.finalizer = "serving.tandem.dev/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="serving.tandem.dev"
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="serving.tandem.dev", key="last-handled-configuration"
    )
    logging.getLogger("kopf.objects").setLevel(tuning.log_level)
    return settings
