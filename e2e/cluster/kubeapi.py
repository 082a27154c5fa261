"""The few ways the harness calls the official ``kubernetes`` client, in one place. Does
API I/O.

Objects travel as plain JSON dicts (the API's camelCase form): the harness reads fields
the client's models may not know yet, and writes patches, not models. Every call has a
timeout.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

__all__ = ["ApiException", "api_client", "call_json", "watch_events"]

REQUEST_TIMEOUT_S = 30


def api_client(kubeconfig: Path) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``kubeconfig`` (never the caller's KUBECONFIG)."""
    return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]


def _body(resp: Any) -> bytes:
    data = getattr(resp, "data", None)
    if data is None:
        data = resp.read()
    return bytes(data)


def call_json(method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Call a client method and return its JSON answer as a dict; None on 404."""
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
    try:
        resp = method(*args, _preload_content=False, **kwargs)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    try:
        answer: dict[str, Any] = json.loads(_body(resp))
    finally:
        close = getattr(resp, "release_conn", None)
        if close is not None:
            close()
    return answer


def watch_events(
    method: Callable[..., Any], resource_version: str, timeout_s: int, **kwargs: Any
) -> Iterator[dict[str, Any]]:
    """The events of one watch request from ``resource_version`` (ends after ``timeout_s``
    or when the server closes it). ERROR events are yielded like the others: a 410 means
    the caller must list again."""
    resp = method(
        watch=True,
        resource_version=resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=timeout_s,
        _preload_content=False,
        _request_timeout=(10, timeout_s + 15),
        **kwargs,
    )
    buffer = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buffer += chunk if isinstance(chunk, bytes) else chunk.encode()
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
    finally:
        resp.close()
        resp.release_conn()


def core(api: Any) -> Any:
    return client.CoreV1Api(api)


def coordination(api: Any) -> Any:
    return client.CoordinationV1Api(api)
