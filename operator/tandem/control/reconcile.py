"""One idempotent reconcile of an InferenceService: parse, build, apply, report. Thin I/O.

Create, update, resume, drift and resync all run this same function. It reads the
service and its children from the caches (no API reads on the happy path), writes only
what differs (:func:`tandem.kube.apply_object`), deletes children the desired state no
longer has, and patches ``.status`` only when it changed. Decisions live in the pure
modules: :mod:`tandem.manifests` (children), :mod:`tandem.control.children` (ownership,
staleness) and :mod:`tandem.control.readiness` (status).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from tandem.api import API_VERSION, KIND
from tandem.api.validate import SpecError, load_inference_service
from tandem.control.children import (
    ChildKey,
    ServiceKey,
    child_key,
    compute_stale,
    make_owner_check,
)
from tandem.control.metrics import OperatorMetrics
from tandem.control.readiness import (
    DesiredStatus,
    compute_invalid_status,
    compute_status,
    compute_status_patch,
)
from tandem.control.restrictions import Restrictions, check_restrictions
from tandem.controller.cache import ObjectCache
from tandem.controller.events import EventRecorder
from tandem.controller.logs import object_logger
from tandem.controller.statuswrite import write_status
from tandem.kube import (
    KubeClient,
    KubeError,
    NotOurs,
    apply_object,
    delete_object,
)
from tandem.kube.semantic import applied_record
from tandem.manifests import Owner, autoscaled, build_children, build_initial_replicas
from tandem.manifests.meta import child_name
from tandem.manifests.network import NetworkPeers

logger = logging.getLogger("tandem.control")
Result = Literal["success", "invalid", "skipped"]
ServiceCache = ObjectCache[ServiceKey, ServiceKey]
ChildCache = ObjectCache[ChildKey, ServiceKey]


class ReconcileError(Exception):
    """Some children could not be written; the work queue retries with backoff."""


class RouterBlocked(Exception):
    """The router's ServiceAccount, Role or RoleBinding belongs to someone else."""


#: Kinds that make up the router's identity (who its pods act as).
IDENTITY_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding"})


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rv(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return None if value is None else str(value)


def _describe(err: BaseException) -> str:
    if isinstance(err, KubeError):
        return f"{err.method} {err.path}: {err.status} {err.reason}: {err.message}"
    return str(err)


class Reconciler:
    """Reconciles one InferenceService at a time (the work queue serializes per key)."""

    def __init__(
        self,
        client: KubeClient,
        services: ServiceCache,
        children: ChildCache,
        events: EventRecorder,
        metrics: OperatorMetrics,
        *,
        restrictions: Restrictions | None = None,
        peers: NetworkPeers | None = None,
        now: Callable[[], str] = now_rfc3339,
    ) -> None:
        self.restrictions = restrictions or Restrictions()
        self.peers = peers or NetworkPeers()
        self.client = client
        self.services = services
        self.children = children
        self.events = events
        self.metrics = metrics
        self._now = now
        #: Child -> (resourceVersion, last-applied record) last found in sync: a resync of
        #: an unchanged service skips the comparison (the version pins the live content).
        self._in_sync: dict[ChildKey, tuple[str | None, str]] = {}

    async def reconcile(self, key: ServiceKey) -> float | None:
        """Work-queue entry point: None when done; raises to be retried with backoff."""
        started = time.perf_counter()
        try:
            result = await self._reconcile(key)
        except (KubeError, ReconcileError):
            self.metrics.reconciles.labels("error").inc()
            raise
        except Exception as err:
            # A resource the operator cannot handle is reported on itself, and retried
            # with backoff: it never stops the operator or its neighbours.
            self.metrics.reconciles.labels("error").inc()
            body = self.services.get(key)
            if body is not None:
                self.events.record(
                    body,
                    "Warning",
                    "ReconcileFailed",
                    f"the operator could not handle this resource ({type(err).__name__}: "
                    f"{str(err)[:300]}); it retries with backoff",
                )
            logger.exception("reconciling %s/%s failed", *key)
            raise
        finally:
            self.metrics.reconcile_duration.observe(time.perf_counter() - started)
        self.metrics.reconciles.labels(result).inc()
        return None

    async def _reconcile(self, key: ServiceKey) -> Result:
        body = self.services.get(key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return "skipped"
        log = object_logger(logger, body)
        meta = body["metadata"]
        try:
            isvc = load_inference_service({k: v for k, v in body.items() if k != "status"})
        except SpecError as err:
            message = str(err)
            log.warning("invalid spec: %s", message.replace("\n", "; "))
            self.events.record(body, "Warning", "InvalidSpec", message)
            await self._write_status(body, compute_invalid_status(message))
            return "invalid"
        refused = check_restrictions(isvc, self.restrictions)
        if refused:
            message = "\n".join(str(p) for p in refused)
            log.warning("refused by the operator's policy: %s", message.replace("\n", "; "))
            self.events.record(body, "Warning", "PolicyViolation", message)
            await self._write_status(body, compute_invalid_status(message, "PolicyViolation"))
            return "invalid"
        owner = Owner(API_VERSION, KIND, isvc.name, meta["uid"])
        desired = build_children(isvc, owner, self.peers)
        initial = build_initial_replicas(isvc) if autoscaled(isvc) else {}
        live = {child_key(obj): obj for obj in self.children.in_group(key)}
        check = make_owner_check(isvc.name, meta["uid"])

        async def apply_all(batch: list[dict[str, Any]]) -> list[BaseException]:
            results = await asyncio.gather(
                *(
                    self._apply(body, child, live.get(child_key(child)), initial, check, log)
                    for child in batch
                ),
                return_exceptions=True,
            )
            return [r for r in results if isinstance(r, BaseException)]

        # The router's identity first: a router Deployment is only written once its
        # ServiceAccount (and Role, RoleBinding) are Tandem's own.
        identity = [c for c in desired if c["kind"] in IDENTITY_KINDS]
        failures = await apply_all(identity)
        rest = [c for c in desired if c["kind"] not in IDENTITY_KINDS]
        foreign = [f for f in failures if isinstance(f, NotOurs)]
        if foreign:
            router = child_name(isvc, "router")
            rest = [c for c in rest if (c["kind"], c["metadata"]["name"]) != ("Deployment", router)]
            names = ", ".join(
                f"{f.object.get('kind')} {f.object['metadata']['name']}" for f in foreign
            )
            message = (
                f"not writing Deployment {router}: {names} is not Tandem's, and the router "
                "would run with it; delete or rename it"
            )
            self.events.record(body, "Warning", "RouterBlocked", message)
            failures.append(RouterBlocked(message))
        failures += await apply_all(rest)
        for stale in compute_stale(desired, live.values(), meta["uid"]):
            try:
                await self._delete(body, stale, log)
            except KubeError as err:
                failures.append(err)
        for failure in failures:
            if not isinstance(failure, KubeError | NotOurs | RouterBlocked):
                raise failure
        lasting = [f for f in failures if not (isinstance(f, KubeError) and f.transient)]
        if failures and not lasting:
            raise ReconcileError("; ".join(_describe(f) for f in failures))
        deployments = {
            obj["metadata"]["name"]: obj
            for obj in self.children.in_group(key)
            if obj.get("kind") == "Deployment"
        }
        error = "; ".join(_describe(f) for f in lasting) if lasting else None
        await self._write_status(body, compute_status(isvc, deployments, error=error))
        if failures:
            raise ReconcileError(error or "")
        return "success"

    async def _apply(
        self,
        body: Mapping[str, Any],
        desired: dict[str, Any],
        live: Mapping[str, Any] | None,
        initial: Mapping[str, int],
        check: Callable[[Mapping[str, Any]], str | None],
        log: logging.LoggerAdapter[Any],
    ) -> None:
        kind, name = desired["kind"], desired["metadata"]["name"]
        key = child_key(desired)
        record = applied_record(desired)
        if live is not None and self._in_sync.get(key) == (_rv(live), record):
            return  # compared before, and neither side changed since
        create_only = None
        if kind == "Deployment" and name in initial:
            create_only = {"spec": {"replicas": initial[name]}}
        try:
            applied = await apply_object(
                self.client, desired, live, create_only=create_only, check_owner=check
            )
        except NotOurs as err:
            self.events.record(body, "Warning", "ChildConflict", f"{kind} {name} {err.why}")
            raise
        except KubeError as err:
            self.events.record(
                body,
                "Warning",
                "ApplyFailed",
                f"writing {kind} {name} failed, will retry: {err.status} "
                f"{err.reason}: {err.message}",
            )
            raise
        if applied.object is not live:
            self.children.observe(applied.object, written=applied.verb != "unchanged")
        self._in_sync[key] = (_rv(applied.object), record)
        if applied.verb == "unchanged":
            return
        self.metrics.child_writes.labels(kind, applied.verb).inc()
        if applied.verb == "create":
            self.events.record(body, "Normal", "Created", f"Created {kind} {name}")
            log.info("created %s %s", kind, name)
        else:
            fields = ", ".join(applied.changed) or "metadata"
            self.events.record(body, "Normal", "Updated", f"Updated {kind} {name}: {fields}")
            log.info("updated %s %s: %s", kind, name, fields)

    async def _delete(
        self, body: Mapping[str, Any], obj: Mapping[str, Any], log: logging.LoggerAdapter[Any]
    ) -> None:
        kind, name = obj.get("kind"), obj["metadata"]["name"]
        try:
            gone = await delete_object(self.client, obj)
        except KubeError as err:
            self.events.record(
                body,
                "Warning",
                "DeleteFailed",
                f"deleting {kind} {name} failed, will retry: {err.status} "
                f"{err.reason}: {err.message}",
            )
            raise
        self.children.forget(obj)
        self._in_sync.pop(child_key(obj), None)
        if gone:
            self.metrics.child_writes.labels(str(kind), "delete").inc()
            self.events.record(
                body,
                "Normal",
                "Deleted",
                f"Deleted {kind} {name}: no longer part of the desired state",
            )
            log.info("deleted %s %s", kind, name)

    async def _write_status(self, body: Mapping[str, Any], desired: DesiredStatus) -> None:
        """Patch ``.status`` if it differs, conditional on the version it was computed
        from; on a conflict, re-read once and recompute."""
        generation = body["metadata"].get("generation")

        def compute(current: Mapping[str, Any]) -> dict[str, Any] | None:
            status = current.get("status")
            return compute_status_patch(status, desired, generation=generation, now=self._now())

        if await write_status(self.client, self.services, body, compute, attempts=2) is not None:
            self.metrics.status_writes.inc()
