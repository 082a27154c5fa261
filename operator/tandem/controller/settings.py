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

import logging
from collections.abc import Mapping

import kopf

from tandem.controller.config import KopfTuning
from tandem.kube import ResourceType


def build_settings(
    tuning: KopfTuning, label_selectors: Mapping[ResourceType, str] | None = None
) -> kopf.OperatorSettings:
    """``kopf.OperatorSettings`` for ``tuning``, with the fixed choices below.

    ``label_selectors``: the server-side selector each watched resource type is listed
    and watched with (the operator's children: only those it manages, so its memory
    follows its own objects, not every Deployment in the cluster)."""
    settings = kopf.OperatorSettings()
    # The API server parses timeoutSeconds as an integer: Kopf sends the setting as it
    # is, and "300.0" is answered 400, so no watch of Kopf's would ever open.
    settings.watching.server_timeout = max(1, round(tuning.watch_server_timeout_s))
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
    # No cluster-wide reads: scanning lists and watches every CustomResourceDefinition and,
    # when namespaces are named, every Namespace, which the chart's least-privilege RBAC
    # does not grant (the API server answers 403, and Kopf retried every few seconds).
    # The namespaces served are the ones named; the resources are those the API's
    # discovery lists at start (a Prometheus Operator installed later is picked up at
    # the next restart).
    settings.scanning.disabled = True
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
