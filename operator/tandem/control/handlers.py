"""The Kopf handlers: thin adapters from watch events to the :class:`Runtime`. No logic.

InferenceServices are not watched through Kopf but by the runtime itself
(:meth:`~tandem.control.runtime.Runtime.watch_services`), whose decoding bounds nesting.
All handlers are ``async``: Kopf runs plain functions in a thread pool, and the runtime
belongs to the event loop. They are registered on a registry of their own (not Kopf's
global one), so two operators can run in one process. ``@kopf.index`` on every child
kind makes Kopf finish listing all children before any handler runs, so a restarted
operator sees every existing child before its first reconcile (and creates nothing twice).
"""

from __future__ import annotations

from typing import Any

import kopf

from tandem.control.runtime import Runtime
from tandem.kube import CHILD_TYPES, Connection


def build_registry(
    runtime: Runtime, connection: Connection, default_namespace: str | None = None
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=connection.server,
            ca_path=connection.ca_path,
            insecure=connection.insecure,
            token=connection.token,
            certificate_path=connection.certificate_path,
            private_key_path=connection.private_key_path,
            default_namespace=default_namespace,
        )

    @kopf.on.probe(id="reconciler", registry=registry)
    async def probe(**_: Any) -> dict[str, Any]:
        return {
            "services": len(runtime.services),
            "queued": runtime.queue.depth,
            "retrying": len(runtime.queue.failures),
        }

    async def index_child(body: kopf.Body, **_: Any) -> None:
        runtime.observe_child(body)

    async def child_event(event: kopf.RawEvent, **_: Any) -> None:
        runtime.on_child_event(event["type"], event["object"])

    for rtype in CHILD_TYPES:
        kopf.index(
            rtype.group, rtype.version, rtype.plural, id=f"index-{rtype.plural}", registry=registry
        )(index_child)
        kopf.on.event(
            rtype.group, rtype.version, rtype.plural, id=f"event-{rtype.plural}", registry=registry
        )(child_event)
    return registry
