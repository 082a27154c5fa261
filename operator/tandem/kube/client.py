"""The HTTP client of the Kubernetes API for all of Tandem. Does I/O.

Built on ``kubernetes_asyncio`` — the project's async client — for what it does well:
loading kubeconfig files and in-cluster service-account credentials (token rotation,
exec plugins, client certificates) and pooling HTTP connections. Requests go through its
generic ``ApiClient.call_api`` with plain dicts rather than its generated typed models:
the builders produce dicts, the typed models drop fields they do not know (custom
resources, newer API fields) and would force a snake_case round trip on every write.

Every failure is a :class:`KubeError` carrying the ``Status`` reason, so callers decide
on conflicts, absence and retries without knowing the HTTP library.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from tandem import __version__
from tandem.kube.decode import loads_bounded

MERGE_PATCH = "application/merge-patch+json"
#: The name the API server records for Tandem's writes in ``metadata.managedFields``.
FIELD_MANAGER = "tandem-operator"
JSON = "application/json"

#: Called after every request with (method, path, HTTP status or 0 when none came back).
RequestObserver = Callable[[str, str, int], None]


class KubeError(Exception):
    """A failed API request: HTTP ``status`` (0 when no answer came) and Status ``reason``."""

    def __init__(
        self, status: int, reason: str, message: str, *, method: str = "", path: str = ""
    ) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        """A stale resourceVersion or failed precondition: re-read and try again."""
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def transient(self) -> bool:
        """Worth retrying unchanged: no answer, throttling, server errors, conflicts."""
        return self.status in (0, 429) or self.status >= 500 or self.conflict


@dataclass(frozen=True)
class Connection:
    """How to reach the API server, for other clients (Kopf) sharing the credentials."""

    server: str
    token: str | None
    ca_path: str | None
    insecure: bool
    certificate_path: str | None
    private_key_path: str | None


class KubeClient:
    """Requests to one API server with one identity; close it with :meth:`close`."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        timeout_s: float = 30.0,
        observer: RequestObserver | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        self._api = api
        self.timeout_s = timeout_s
        self.observer = observer
        self.field_manager = field_manager

    @classmethod
    def for_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        user_agent: str | None = None,
        insecure: bool = False,
        timeout_s: float = 30.0,
    ) -> KubeClient:
        """A client for ``url`` (tests, benches, ``--server``); call inside an event loop."""
        config = k8s.Configuration(host=url.rstrip("/"))
        config.verify_ssl = not insecure
        if token:
            config.api_key = {"BearerToken": token}
            config.api_key_prefix = {"BearerToken": "Bearer"}
        return cls._from_config(config, user_agent=user_agent, timeout_s=timeout_s)

    @classmethod
    async def from_environment(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        user_agent: str | None = None,
        timeout_s: float = 30.0,
    ) -> KubeClient:
        """In-cluster credentials inside a pod (unless a kubeconfig is named), else the
        kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``) and its current context."""
        config = k8s.Configuration()
        if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=config
            )
        return cls._from_config(config, user_agent=user_agent, timeout_s=timeout_s)

    @classmethod
    def _from_config(
        cls, config: k8s.Configuration, *, user_agent: str | None, timeout_s: float
    ) -> KubeClient:
        api = k8s.ApiClient(config)
        api.user_agent = user_agent or f"tandem/{__version__}"
        return cls(api, timeout_s=timeout_s)

    @property
    def user_agent(self) -> str:
        return str(self._api.user_agent)

    def connection(self) -> Connection:
        config = self._api.configuration
        auth = (config.api_key or {}).get("BearerToken")
        token = auth.removeprefix("Bearer ").strip() if isinstance(auth, str) else None
        return Connection(
            server=str(config.host),
            token=token or None,
            ca_path=config.ssl_ca_cert,
            insecure=not config.verify_ssl,
            certificate_path=config.cert_file,
            private_key_path=config.key_file,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One request; the decoded JSON answer, or :class:`KubeError`. Answers are
        decoded with bounded nesting (:func:`~tandem.kube.decode.loads_bounded`)."""
        status = 0
        try:
            resp = await self._api.call_api(
                path,
                method,
                query_params=self._query(method, query),
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=self.timeout_s,
            )
            try:
                status = resp.status
                raw = await resp.read()
            finally:
                resp.release()
        except k8s.ApiException as err:
            status = int(err.status or 0)
            raise _from_api_exception(err, method, path) from None
        except TimeoutError:
            raise KubeError(
                0, "Timeout", f"no answer in {self.timeout_s:g}s", method=method, path=path
            ) from None
        except aiohttp.ClientError as err:
            raise KubeError(
                0, "ConnectionError", str(err) or type(err).__name__, method=method, path=path
            ) from None
        finally:
            if self.observer is not None:
                self.observer(method, path, status)
        if not 200 <= status <= 299:
            raise _from_status(status, raw, method, path)
        try:
            data = loads_bounded(raw) if raw.strip() else {}
        except ValueError as err:
            raise KubeError(
                status, "BadResponse", f"not JSON: {err}", method=method, path=path
            ) from None
        return data if isinstance(data, dict) else {}

    async def stream(
        self, path: str, *, query: Mapping[str, str] | None = None, timeout_s: float
    ) -> AsyncIterator[dict[str, Any]]:
        """A GET whose answer is a stream of JSON objects, one per line (a watch): each
        decoded object as it arrives, until the server ends the stream. ``timeout_s``
        bounds the whole stream. :class:`KubeError` for a failed request, and
        ``ValueError`` for a line that is not a JSON object."""
        status = 0
        try:
            resp = await self._api.call_api(
                path,
                "GET",
                query_params=self._query("GET", query),
                header_params={"Accept": JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout_s,
            )
        except TimeoutError:
            raise KubeError(0, "Timeout", f"no answer in {timeout_s:g}s", path=path) from None
        except aiohttp.ClientError as err:
            message = str(err) or type(err).__name__
            raise KubeError(0, "ConnectionError", message, method="GET", path=path) from None
        try:
            status = resp.status
            if not 200 <= status <= 299:
                raise _from_status(status, await resp.read(), "GET", path)
            async for line in resp.content:
                if not line.strip():
                    continue
                obj = loads_bounded(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"not a JSON object: {line[:200]!r}")
                yield obj
        except aiohttp.ClientError as err:
            message = str(err) or type(err).__name__
            raise KubeError(0, "ConnectionError", message, method="GET", path=path) from None
        finally:
            resp.release()
            if self.observer is not None:
                self.observer("GET", path, status)

    def _query(self, method: str, query: Mapping[str, str] | None) -> list[tuple[str, str]]:
        params = list((query or {}).items())
        if method in ("POST", "PUT", "PATCH") and self.field_manager:
            params.append(("fieldManager", self.field_manager))
        return params

    async def close(self) -> None:
        await self._api.close()


def _from_api_exception(err: k8s.ApiException, method: str, path: str) -> KubeError:
    return _from_status(int(err.status or 0), err.body, method, path, str(err.reason or ""))


def _from_status(
    code: int, body: bytes | str | None, method: str, path: str, reason: str = ""
) -> KubeError:
    """The error of an answer with HTTP status ``code`` and a ``Status`` ``body``."""
    message = ""
    try:
        status = json.loads(body or "{}")
    except (TypeError, ValueError):
        status = {}
    if isinstance(status, dict):
        reason = str(status.get("reason") or reason)
        message = str(status.get("message") or "")
    if not message and body:
        message = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    return KubeError(code, reason, message, method=method, path=path)
