"""The autoscaler inside the operator: one tick per InferenceService. Thin I/O shell.

Registered on the runtime as the ticker ``autoscaler`` (:class:`~tandem.controller.ticker.
Tickers`: leader only, every ``spec.autoscaling.interval`` seconds, holding the service's
work-queue lock so it never overlaps a reconcile; no ticks while the spec is invalid).
One tick::

    list the service's pods (one request)  ──▶  targets: each pool's Deployment replicas
    and ready pods' metrics URLs, the ready router pods  ──▶  observe (scrape the pods,
    or ask Prometheus)  ──▶  compute_tick with .status  ──▶  for each pool whose size
    changes: deletion costs before a scale-down, PATCH deployments/scale, an Event
    ──▶  PATCH .status (every tick)  ──▶  tandem_autoscaler_* metrics

The policy, the targets, the status merge and the metric labels are pure
(:mod:`tandem.policy`, :mod:`tandem.control.scaling`,
:mod:`tandem.control.autoscale_metrics`). The only memory kept between ticks is each
service's metrics source (the pod scraper's previous samples, for rates) and the sizes
this operator wrote: after a restart the first tick has gauges but no rates, and the
policy holds. Every other piece of state lives in ``status.autoscaler``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tandem.api import InferenceService
from tandem.api.validate import SpecError, load_inference_service
from tandem.control.autoscale_metrics import AutoscalerSeries
from tandem.control.children import ServiceKey
from tandem.control.reconcile import now_rfc3339
from tandem.control.restrictions import check_restrictions
from tandem.control.runtime import Runtime
from tandem.control.scaling import (
    Written,
    compute_autoscaler_status_patch,
    compute_cost_annotations,
    compute_live_replicas,
    compute_pool_targets,
    compute_prometheus_window_s,
    compute_router_targets,
)
from tandem.control.tick import (
    DELETION_COST_ANNOTATION,
    Tick,
    compute_deletion_costs,
    compute_tick,
)
from tandem.controller.logs import object_logger
from tandem.controller.statuswrite import write_status
from tandem.controller.ticker import TickContext
from tandem.kube import (
    POD,
    KubeError,
    fetch_objects,
    patch_annotations,
    patch_scale,
)
from tandem.manifests.meta import ROLE_LABEL, SERVICE_LABEL, child_name
from tandem.observe.prometheus import PrometheusSource
from tandem.observe.promql import PromTarget
from tandem.observe.scrape import Scraper
from tandem.observe.types import Observation
from tandem.policy import compute_policy_config

logger = logging.getLogger("tandem.control")
TICKER = "autoscaler"
Source = Scraper | PrometheusSource


@dataclass
class _Service:
    """What the autoscaler keeps in memory for one service (all of it disposable)."""

    source: Source
    source_key: tuple[Any, ...]
    written: dict[str, Written] = field(default_factory=dict)
    """Deployment name → the size this operator last wrote (until the cache has it)."""


class Autoscaler:
    """Sizes every managed InferenceService's pools; :meth:`register` it on a runtime."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        session: aiohttp.ClientSession | None = None,
        now: Callable[[], str] = now_rfc3339,
    ) -> None:
        self.runtime = runtime
        self.series = AutoscalerSeries(runtime.metrics)
        self._session = session
        self._owns_session = session is None
        self._now = now
        self._services: dict[ServiceKey, _Service] = {}
        #: Parsed spec per service, with the (uid, generation) it was parsed from.
        self._parsed: dict[ServiceKey, tuple[tuple[Any, Any], InferenceService | None]] = {}

    def register(self) -> None:
        self.runtime.tickers.add(
            TICKER, self.interval_s, self.tick, forget=self.forget, close=self.close
        )

    # ------------------------------------------------------------ ticker callbacks

    def interval_s(self, body: Mapping[str, Any]) -> float | None:
        """``spec.autoscaling.interval`` in seconds; None (no ticks) for an invalid spec."""
        isvc = self._parse(body)
        return None if isvc is None else isvc.spec.autoscaling.interval

    async def tick(self, ctx: TickContext) -> None:
        isvc = self._parse(ctx.body)
        if isvc is None:
            return
        namespace, name = ctx.key
        client = self.runtime.client
        state = self._service(ctx.key, isvc)
        pods = await fetch_objects(client, POD, namespace, f"{SERVICE_LABEL}={name}")
        deployments = {
            obj["metadata"]["name"]: obj for obj in ctx.children if obj.get("kind") == "Deployment"
        }
        targets = compute_pool_targets(isvc, deployments, pods, state.written)
        if targets is None:
            return  # a pool's Deployment is not created yet: nothing to size
        obs = await state.source.observe(targets, compute_router_targets(isvc, pods))
        config = compute_policy_config(isvc)
        now = self._now()
        tick = compute_tick(ctx.body.get("status"), obs, config, now)
        if config.policy != "static" and tick.scale:  # a static pool is never resized here
            scaled = await self._scale(ctx, isvc, tick, obs, pods, deployments, state)
            if not scaled:
                return
        self.series.record(ctx.key, config, obs, tick.decision)
        await self._write_status(ctx.body, tick, now)

    def forget(self, key: ServiceKey) -> None:
        """The service was deleted: drop its source, its sizes and its series."""
        self._services.pop(key, None)
        self._parsed.pop(key, None)
        self.series.forget(key)

    async def close(self) -> None:
        """The runtime stops (no longer leading): close the sources, remove every series."""
        services, self._services = list(self._services.values()), {}
        for service in services:
            await service.source.aclose()
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
        self._parsed.clear()
        self.series.forget_all()

    # ------------------------------------------------------------ internals

    def _parse(self, body: Mapping[str, Any]) -> InferenceService | None:
        """The spec, parsed and checked as the reconciler does; None when invalid.
        Parsed once per generation (every spec change bumps it)."""
        meta = body.get("metadata") or {}
        key: ServiceKey = (str(meta.get("namespace")), str(meta.get("name")))
        version = (meta.get("uid"), meta.get("generation"))
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == version and version[1] is not None:
            return cached[1]
        try:
            isvc: InferenceService | None = load_inference_service(
                {k: v for k, v in body.items() if k != "status"}
            )
        except SpecError:
            isvc = None  # the reconciler reports it (Ready=False, InvalidSpec)
        if isvc is not None and check_restrictions(isvc, self.runtime.restrictions):
            isvc = None  # nor is a refused one queried (its metrics URL above all)
        self._parsed[key] = (version, isvc)
        return isvc

    def _service(self, key: ServiceKey, isvc: InferenceService) -> _Service:
        metrics, model = isvc.spec.autoscaling.metrics, isvc.spec.model.name
        source_key = (metrics.source, metrics.url, metrics.scrape_timeout, model)
        state = self._services.get(key)
        if state is not None and state.source_key == source_key:
            return state
        if self._session is None:
            self._session = aiohttp.ClientSession()
        source: Source
        if metrics.source == "prometheus" and metrics.url:
            source = PrometheusSource(
                metrics.url,
                PromTarget(isvc.namespace, isvc.name, model_name=model),
                self._session,
                window_s=compute_prometheus_window_s(isvc),
                timeout_s=metrics.scrape_timeout,
            )
        else:
            source = Scraper(self._session, timeout_s=metrics.scrape_timeout, model_name=model)
        written = state.written if state is not None else {}
        self._services[key] = _Service(source, source_key, written)
        return self._services[key]

    async def _scale(
        self,
        ctx: TickContext,
        isvc: InferenceService,
        tick: Tick,
        obs: Observation,
        pods: list[dict[str, Any]],
        deployments: Mapping[str, Mapping[str, Any]],
        state: _Service,
    ) -> bool:
        """Resize the pools whose size changes; False when a write conflicted (someone
        else changed a Deployment since it was read: the next tick decides again)."""
        namespace = ctx.key[0]
        log = object_logger(logger, ctx.body)
        for role, replicas in tick.scale.items():
            decision = tick.decision.pools[role]
            name = child_name(isvc, role)
            pool = obs.pools.get(role)
            if decision.direction == "down" and pool is not None:
                members = [p for p in pods if _role(p) == role]
                await self._annotate(namespace, members, compute_deletion_costs(pool), log)
            _, version = compute_live_replicas(deployments[name], state.written.get(name))
            try:
                scale = await patch_scale(
                    self.runtime.client, namespace, name, replicas, resource_version=version
                )
            except KubeError as err:
                if err.conflict or err.not_found:
                    log.info("not scaling Deployment %s this tick: %s", name, err)
                    return False
                raise
            state.written[name] = Written(replicas, str(scale["metadata"]["resourceVersion"]))
            up = decision.direction == "up"
            reason = "ScaledUp" if up else "ScaledDown"
            self.runtime.events.record(ctx.body, "Normal", reason, decision.reason, dedupe=False)
            log.info("scaled Deployment %s: %s", name, decision.reason)
        return True

    async def _annotate(
        self,
        namespace: str,
        pods: list[dict[str, Any]],
        costs: Mapping[str, int],
        log: logging.LoggerAdapter[Any],
    ) -> None:
        """Set ``pod-deletion-cost`` where it differs, so the least-loaded pods go first."""
        changes = compute_cost_annotations(pods, costs)

        async def one(pod: str, value: str) -> None:
            try:
                await patch_annotations(
                    self.runtime.client, POD, namespace, pod, {DELETION_COST_ANNOTATION: value}
                )
            except KubeError as err:
                if not err.not_found:  # best effort: the scale-down goes ahead regardless
                    log.warning("could not set the deletion cost of pod %s: %s", pod, err)

        await asyncio.gather(*(one(pod, value) for pod, value in changes.items()))

    async def _write_status(self, body: Mapping[str, Any], tick: Tick, now: str) -> None:
        """Patch ``.status`` conditional on the version read; on a conflict, re-read and
        merge the conditions into the fresh list (the reconciler owns the others)."""
        generation = body["metadata"].get("generation")

        def compute(current: Mapping[str, Any]) -> dict[str, Any]:
            status = current.get("status")
            return compute_autoscaler_status_patch(status, tick, generation=generation, now=now)

        runtime = self.runtime
        await write_status(runtime.client, runtime.services, body, compute, attempts=3)


def _role(pod: Mapping[str, Any]) -> str | None:
    role = ((pod.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL)
    return None if role is None else str(role)


def setup_autoscaler(runtime: Runtime) -> Autoscaler:
    """Create the autoscaler and register it on ``runtime`` (an ``Operator`` setup)."""
    autoscaler = Autoscaler(runtime)
    autoscaler.register()
    return autoscaler
