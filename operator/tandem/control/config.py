"""How one operator runs, as a dataclass whose defaults the command line shows. No I/O."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from tandem.control.restrictions import Restrictions
from tandem.controller.config import KopfTuning, LeaseConfig
from tandem.manifests.network import NetworkPeers


def default_identity() -> str:
    """``<hostname>-<pid>``: unique per replica (the pod name is the hostname)."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class OperatorConfig:
    """How one operator runs. Durations in seconds."""

    namespaces: Sequence[str] = ()
    """Namespaces to serve; empty serves all namespaces."""
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = 8080
    """Port of /metrics and /healthz; 0 picks a free one, None serves none."""
    liveness: str | None = "http://0.0.0.0:8081/healthz"
    """Kopf's liveness endpoint (answers "standby" until this replica leads)."""
    leader_election: bool = True
    lease: LeaseConfig = field(default_factory=lambda: LeaseConfig(default_identity()))
    workers: int = 16
    """Services reconciled concurrently."""
    resync_interval_s: float = 600.0
    event_dedupe_s: float = 300.0
    event_spool: str | None = None
    """File the Events still undelivered at stop are written to and the next process
    posts (an emptyDir path: it survives a container restart); None logs them instead."""
    event_flush_s: float = 5.0
    """How long a stopping operator keeps trying to post its Events."""
    outage_report_s: float = 10.0
    """An API outage at least this long is reported on every service once it ends."""
    retry_base_s: float = 0.5
    retry_max_s: float = 300.0
    kopf: KopfTuning = field(default_factory=KopfTuning)
    stop_timeout_s: float = 20.0
    """How long Kopf may take to stop before it is cancelled."""
    restrictions: Restrictions = field(default_factory=lambda: Restrictions(prometheus_urls=()))
    """What InferenceServices may ask for (images, Secrets, Prometheus URLs). Default:
    any image and Secret, no Prometheus URL (the ``pods`` source needs none)."""
    peers: NetworkPeers = field(default_factory=NetworkPeers)
    """The operator's own namespace and Prometheus's: the engines' NetworkPolicy admits
    their pods (by namespace and label) to the engines' HTTP port."""
    autoscaler: bool = True
    """Run the autoscaler (:mod:`tandem.control.autoscale`) on every InferenceService;
    off, the pools keep whatever size they have (``replicas.initial`` when created)."""

    @property
    def identity(self) -> str:
        return self.lease.identity
