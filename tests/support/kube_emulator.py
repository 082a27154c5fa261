"""A realism layer over ``kmock.KubernetesEmulator``: the API semantics an operator relies on.

Test support; it does network I/O (it is an HTTP server on loopback). kmock 0.8 stores
objects as plain JSON and merges patches naively. This layer serves every request for a
registered resource itself, with the behaviour the Kubernetes API documents
(https://kubernetes.io/docs/reference/using-api/api-concepts/):

* ``metadata.uid``, ``creationTimestamp``, ``generation`` (1 on create, +1 when anything
  but ``metadata``/``status`` changes), ``resourceVersion`` from one global counter,
  bumped on every write that changes the object (a no-op write keeps it and emits no
  event), ``generateName``;
* 201 on create, 409 ``AlreadyExists``, 404 ``NotFound`` with a ``Status`` body;
* PATCH (JSON merge patch and JSON patch; strategic merge and apply patches answer 415),
  PUT, and 409 ``Conflict`` when a write carries a stale ``resourceVersion`` or another
  ``uid`` (also as DELETE preconditions);
* the ``status`` subresource (writes there touch only ``.status``; writes to the main
  resource keep ``.status``) and the ``scale`` subresource (``autoscaling/v1`` Scale
  over ``spec.replicas``/``status.replicas``);
* list and watch with ``labelSelector`` and ``fieldSelector`` (name, namespace), lists
  with ``kind``/``apiVersion``/``resourceVersion``, watches as JSON streams that honour
  ``?resourceVersion=`` (:mod:`tests.support.kube_watch`);
* deletion with finalizers (``deletionTimestamp`` first, gone when the last is removed);
* core discovery (kmock reports ``groupVersion: "/v1"``) and a constant-time match of
  user reactions (kmock re-filters the whole request history on every request);
* injected faults (:mod:`tests.support.kube_faults`) and cut watch streams.

What it still does NOT emulate — tests needing these belong in ``e2e/``: garbage
collection through ownerReferences, controllers (a Deployment's status only changes when
a test writes it), admission and RBAC, schema validation and defaulting (no
``replicas: 1``, no ``clusterIP``), CEL rules, server-side apply and field ownership
(``managedFields``), strategic merge patch, ``dryRun``, pagination (``limit`` is ignored;
lists are never chunked), watch bookmarks, the ``namespaces`` resource itself (namespaces
need not exist), and ``deletecollection``.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import dsl, rendering

from tests.support import kube_verbs as verbs
from tests.support.kube_faults import FaultInjector
from tests.support.kube_semantics import ApiError
from tests.support.kube_store import Key, Store
from tests.support.kube_verbs import ScalePaths
from tests.support.kube_watch import serve_watch

ALL_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One request for an object of a registered resource, with the answered status."""

    method: str
    path: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    status: int
    user_agent: str
    query: str = ""
    watch: bool = False
    body: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """The emulated API server. Start it with :func:`tests.support.serve_emulator`."""

    #: Watch events kept for ``?resourceVersion=`` replay (None: all); older ones are 410.
    history_limit: int | None = None
    #: Keep every version in ``objects[...].history`` (tests) or only the latest (benches).
    keep_versions: bool = True
    #: Server-side end of a watch without ``timeoutSeconds`` (None: never), seconds.
    watch_timeout_s: float | None = None
    seed: int = 0
    scale_paths: dict[kmock.resource, ScalePaths] = attrs.field(factory=dict)
    faults: FaultInjector = attrs.field(init=False)
    log: list[Entry] = attrs.field(factory=list, init=False)
    store: Store = attrs.field(init=False)
    _builtin: set[int] = attrs.field(factory=set, init=False)
    _rng: random.Random = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults = FaultInjector(self.seed)
        self.store = Store(
            self._objects, keep_versions=self.keep_versions, history_limit=self.history_limit
        )
        self._rng = random.Random(self.seed)
        self._builtin = {id(payload) for payload in self._payloads}

    # ---------------------------------------------------------------- for tests

    def mark(self) -> int:
        """A position in :attr:`log`, for ``writes(since=...)``."""
        return len(self.log)

    def writes(
        self,
        since: int = 0,
        *,
        ok: bool = True,
        plural: str | None = None,
        agent: str | None = None,
    ) -> list[Entry]:
        """Write requests logged after ``since``; ``ok``: only those answered 2xx;
        ``agent``: only those whose User-Agent contains it."""
        return [
            e
            for e in self.log[since:]
            if e.is_write
            and (not ok or 200 <= e.status < 300)
            and (plural is None or e.plural == plural)
            and (agent is None or agent in e.user_agent)
        ]

    def fetch(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object, or None (a deep copy; mutate freely)."""
        found = self.store.current((kmock.resource(resource), namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(obj)
            for key, obj in self.store.items(kmock.resource(resource))
            if namespace in (None, key[1])
        ]

    def patch_object(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch an object in process, as a controller would (same rules as HTTP)."""
        res = kmock.resource(resource)
        return verbs.patch_in_process(
            self.store, (res, namespace, name), self.resources[res], patch, subresource
        )

    def delete_object(self, resource: str, namespace: str | None, name: str) -> None:
        """Delete an object in process, as a person with kubectl would."""
        verbs.delete(self.store, (kmock.resource(resource), namespace, name), None)

    def cut_watches(self, plural: str | None = None, *, abort: bool = False) -> int:
        """End open watch streams (``abort``: drop the connection mid-stream)."""
        cut = [s for s in self.store.subscribers if plural in (None, s.resource.plural)]
        for sub in cut:
            sub.abort = abort
            sub.push(None)
        return len(cut)

    def open_watches(self, plural: str | None = None) -> int:
        return sum(1 for s in self.store.subscribers if plural in (None, s.resource.plural))

    # ---------------------------------------------------------------- dispatching

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if res is None or res.plural is None or not res.version:
            response = await self._react(request)
            assert response is not None
            return response
        user = await self._react(request, user_only=True)
        if user is not None:
            return user
        raw = request._raw_request
        assert raw is not None
        method = str(request.method.value)
        entry = dict(
            method=method,
            path=raw.path,
            query=raw.query_string,
            plural=res.plural,
            namespace=request.namespace,
            name=request.name,
            subresource=request.subresource,
            user_agent=raw.headers.get("User-Agent", ""),
            body=request.data,
        )
        try:
            info = self._info(res)
            fault = self.faults.pick(method, raw.path_qs, res.plural, request.subresource)
            if fault is not None and not fault.lost_reply:
                await asyncio.sleep(fault.delay_s)
                raise ApiError(fault.status, fault.reason, fault.message)
            if method == "GET" and request.params.get("watch") in ("true", "1"):
                if info.namespaced is False and request.namespace is not None:
                    raise ApiError(404, "NotFound", "the server could not find the resource")
                self.log.append(Entry(status=200, watch=True, **entry))
                return await serve_watch(
                    self.store,
                    res,
                    info,
                    request.namespace,
                    request.name,
                    request.params,
                    raw,
                    self.watch_timeout_s,
                )
            status, body = self._serve(request, res, info, method, raw)
            if fault is not None:
                await asyncio.sleep(fault.delay_s)
        except ApiError as err:
            status, body = err.code, err.status()
        self.log.append(Entry(status=status, **entry))
        return aiohttp.web.json_response(body, status=status)

    def _serve(
        self,
        request: rendering.Request,
        res: kmock.resource,
        info: kmock.ResourceInfo,
        method: str,
        raw: aiohttp.web.BaseRequest,
    ) -> tuple[int, Any]:
        ns, sub, name = request.namespace, request.subresource, request.name
        if info.namespaced is False and ns is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        content_type = raw.headers.get("Content-Type", "")
        if "dryRun" in request.params:
            raise ApiError(400, "BadRequest", "dryRun is not emulated")
        if name is None:
            if method == "GET":
                return 200, verbs.list_objects(self.store, res, info, ns, request.params)
            if method == "POST":
                if info.namespaced and ns is None:
                    raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
                return 201, verbs.create(self.store, self._rng, request.data, res, info, ns)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not emulated")
        key: Key = (res, ns, name)
        if sub is not None and sub not in info.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "scale":
            paths = self.scale_paths.get(res, ScalePaths())
            return 200, verbs.scale(
                self.store, key, info, paths, method, request.data, content_type
            )
        if method == "GET":
            return 200, self.store.require(key)
        if method in ("PATCH", "PUT"):
            return 200, verbs.update(self.store, key, info, method, request.data, content_type, sub)
        if method == "DELETE" and sub is None:
            return 200, verbs.delete(self.store, key, request.data)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _info(self, res: kmock.resource) -> kmock.ResourceInfo:
        if res not in self.resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self.resources[res]

    async def _react(
        self, request: rendering.Request, *, user_only: bool = False
    ) -> aiohttp.web.StreamResponse | None:
        """kmock's reaction loop, with a membership test that does not rescan history."""
        ordered = sorted(self._payloads, key=lambda p: tuple(-x for x in p.priorities))
        for payload in ordered:
            if user_only and id(payload) in self._builtin:
                continue
            if payload._disabled.is_set() or not self._contains(payload._source, request):
                continue
            try:
                return await payload(request)
            except rendering.ReactionMismatchError:
                payload._disabled.set()
            except NotImplementedError:
                pass
        if user_only:
            return None
        raise NotImplementedError("no reaction matches the request")

    def _contains(self, view: dsl.View, request: rendering.Request) -> bool:
        """Whether ``request`` passes ``view``, checking this request only."""
        if isinstance(view, dsl.Root):
            return view is self
        if type(view) is dsl.Filter:
            return bool(view.criteria(request)) and self._contains(view._source, request)
        if type(view) is dsl.Priority:
            return self._contains(view._source, request)
        if type(view) is dsl.OrGroup:
            return any(self._contains(v, request) for v in view._sources)
        if type(view) is dsl.AndGroup:
            return all(self._contains(v, request) for v in view._sources)
        if type(view) is dsl.Exclusion:
            return self._contains(view._source, request) and not any(
                self._contains(v, request) for v in view._exclusions
            )
        return request in view  # slices and live streams depend on history: exact, slow

    async def _serve_version(self, request: rendering.Request) -> rendering.Payload:
        payload = await super()._serve_version(request)
        assert isinstance(payload, dict) and request.resource is not None
        if request.resource.group == "":
            payload["groupVersion"] = request.resource.version
        return payload


def register_resources(emulator: Emulator, *, monitoring: bool = True) -> None:
    """Built-in resources, the InferenceService CRD and (optionally) Prometheus Operator's."""
    emulator.resources.load_bundled()
    emulator.resources["serving.tandem.dev/v1alpha1/inferenceservices"] = kmock.ResourceInfo(
        kind="InferenceService",
        singular="inferenceservice",
        namespaced=True,
        subresources={"status", "scale"},
        verbs=ALL_VERBS,
        shortnames={"tisvc"},
    )
    if monitoring:
        for kind in ("ServiceMonitor", "PodMonitor"):
            emulator.resources[f"monitoring.coreos.com/v1/{kind.lower()}s"] = kmock.ResourceInfo(
                kind=kind, singular=kind.lower(), namespaced=True, verbs=ALL_VERBS
            )
