"""One operator process: metrics, leader election, and — while leading — Kopf and the
runtime. Does I/O (through its parts).

Lifecycle of :meth:`Operator.run`::

    serve /metrics and /healthz  ──▶  wait for the Lease (standby; the liveness endpoint
    answers "standby")  ──▶  lead: start the runtime (reconciler and autoscaler), run
    Kopf, renew the Lease
    ──▶  on SIGTERM/stop: stop writing, stop Kopf, release the Lease   (exit 0)
    ──▶  on a lost Lease: stop writing at once, stop Kopf              (exit 1, restart)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import kopf

from tandem.control.autoscale import setup_autoscaler
from tandem.control.children import CHILD_SELECTOR
from tandem.control.config import OperatorConfig
from tandem.control.handlers import build_registry
from tandem.control.metrics import OperatorMetrics
from tandem.control.runtime import Runtime
from tandem.controller.availability import ApiAvailability
from tandem.controller.http import HttpServer, metrics_app, serve_standby_liveness
from tandem.controller.leadership import LeaderElector
from tandem.controller.settings import build_settings
from tandem.kube import CHILD_TYPES, KubeClient

logger = logging.getLogger("tandem.control")


Setup = Callable[[Runtime], None]


class Operator:
    """Runs :class:`Runtime` + Kopf under leader election; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        config: OperatorConfig,
        *,
        metrics: OperatorMetrics | None = None,
        setup: Setup | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.metrics = metrics or OperatorMetrics()
        self.setup = setup
        self.runtime: Runtime | None = None
        self.role = "starting"
        self.metrics_port: int | None = None
        #: Set once Kopf has started watching (threading: usable from other threads).
        self.kopf_ready = threading.Event()
        #: ``time.monotonic()`` when the Lease was lost (writes stop right then), or None.
        self.lost_lease_at: float | None = None
        self.availability = ApiAvailability(config.outage_report_s)
        client.observer = self._observe_request

    def _observe_request(self, method: str, path: str, status: int) -> None:
        self.metrics.observe_request(method, path, status)
        outage = self.availability.observe(status)
        if outage is not None and self.runtime is not None:
            self.runtime.report_outage(outage)

    def health(self) -> dict[str, Any]:
        runtime = self.runtime
        return {
            "role": self.role,
            "identity": self.config.identity,
            "services": 0 if runtime is None else len(runtime.services),
        }

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (0) or the Lease is lost or Kopf fails (1)."""
        cfg = self.config
        server = None
        if cfg.metrics_port is not None:
            server = HttpServer(
                metrics_app(self.metrics, self.health), cfg.metrics_host, cfg.metrics_port
            )
            self.metrics_port = await server.start()
        elector = LeaderElector(self.client, cfg.lease) if cfg.leader_election else None
        try:
            if elector is not None:
                self.role = "standby"
                standby = serve_standby_liveness(cfg.liveness) if cfg.liveness else None
                if standby is not None:
                    await standby.start()
                try:
                    logger.info(
                        "waiting for the leader Lease %s/%s as %s",
                        cfg.lease.namespace,
                        cfg.lease.name,
                        cfg.identity,
                    )
                    if not await elector.acquire(stop):
                        return 0
                finally:
                    if standby is not None:
                        await standby.stop()
                logger.info("acquired the leader Lease as %s", cfg.identity)
            self.metrics.leader.set(1)
            return await self._lead(stop, elector)
        finally:
            self.role = "stopped"
            self.metrics.leader.set(0)
            if elector is not None:
                await elector.release()
            if server is not None:
                await server.stop()

    async def _lead(self, stop: asyncio.Event, elector: LeaderElector | None) -> int:
        cfg = self.config
        self.role = "leader"
        runtime = Runtime(
            self.client,
            self.metrics,
            identity=cfg.identity,
            workers=cfg.workers,
            resync_interval_s=cfg.resync_interval_s,
            event_dedupe_s=cfg.event_dedupe_s,
            retry_base_s=cfg.retry_base_s,
            retry_max_s=cfg.retry_max_s,
            restrictions=cfg.restrictions,
            peers=cfg.peers,
            availability=self.availability,
            event_spool=cfg.event_spool,
            event_flush_s=cfg.event_flush_s,
        )
        if cfg.autoscaler:
            setup_autoscaler(runtime)
        if self.setup is not None:
            self.setup(runtime)
        self.runtime = runtime
        await runtime.start()
        runtime.watch_services(
            list(cfg.namespaces), watch_timeout_s=cfg.kopf.watch_server_timeout_s
        )
        kopf_stop = asyncio.Event()
        holding = asyncio.create_task(elector.hold(stop) if elector else stop.wait(), name="lease")
        stopping = asyncio.create_task(stop.wait(), name="stop")
        settings = build_settings(cfg.kopf, dict.fromkeys(CHILD_TYPES, CHILD_SELECTOR))
        settings.queueing.exit_timeout = min(
            settings.queueing.exit_timeout, cfg.kopf.worker_idle_timeout_s
        )
        kopf_task = asyncio.create_task(
            kopf.operator(
                registry=build_registry(
                    runtime, self.client.connection(), cfg.namespaces[0] if cfg.namespaces else None
                ),
                settings=settings,
                standalone=True,
                clusterwide=not cfg.namespaces,
                namespaces=list(cfg.namespaces),
                liveness_endpoint=cfg.liveness,
                stop_flag=kopf_stop,
                ready_flag=self.kopf_ready,
            ),
            name="kopf",
        )
        code = 0
        try:
            await asyncio.wait({holding, stopping, kopf_task}, return_when=asyncio.FIRST_COMPLETED)
            if holding.done() and holding.result() is False:
                self.lost_lease_at = time.monotonic()
                logger.error("lost the leader Lease; stopping all writes now")
                code = 1
            elif kopf_task.done():
                error = kopf_task.exception()
                if error is not None:  # else Kopf handled SIGTERM itself: a clean stop
                    logger.error("Kopf stopped: %r", error)
                    code = 1
                stop.set()
        finally:
            await runtime.stop()
            kopf_stop.set()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(cfg.stop_timeout_s):
                    await asyncio.shield(kopf_task)
            if not kopf_task.done():
                kopf_task.cancel()
                with contextlib.suppress(BaseException):
                    await kopf_task
            for task in (holding, stopping):
                task.cancel()
            await asyncio.gather(holding, stopping, return_exceptions=True)
            self.runtime = None
        return code
