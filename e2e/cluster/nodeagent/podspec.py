"""Reading a Pod's spec as the kubelet would: environment, ports, probes. Pure.

Pods are plain dicts in the API's JSON form (camelCase), as the watch delivers them.
Secret and ConfigMap contents come in through lookup functions, so nothing here calls
the API.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity as _parse_quantity

Pod = dict[str, Any]
Lookup = Callable[[str, str], Mapping[str, str] | None]
"""(namespace, name) -> the object's data (Secrets already decoded), or None if absent."""


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``64Gi``) as a number."""
    return Decimal(_parse_quantity(text))  # type: ignore[no-untyped-call]


class SpecError(ValueError):
    """The pod asks for something that cannot be resolved (the message says what)."""


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` escapes,
    unknown references stay as written.

    >>> expand("http://$(HOST):$(PORT)/$(NOPE) $$(HOST)", {"HOST": "h", "PORT": "1"})
    'http://h:1/$(NOPE) $(HOST)'
    """

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, text)


_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Pod, path: str) -> str:
    """The value of a downward-API ``fieldRef``.

    >>> field_ref({"metadata": {"labels": {"app": "x"}}}, "metadata.labels['app']")
    'x'
    """
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    m = _LABEL_PATH.match(path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
    }
    if path not in simple:
        raise SpecError(f"fieldRef {path!r} is not supported; one of {sorted(simple)}")
    return str(simple[path] or "")


def resource_field_ref(
    container: Mapping[str, Any], ref: Mapping[str, Any], allocatable: Mapping[str, str]
) -> str:
    """The value of a ``resourceFieldRef``: the container's limit (or, without one, the
    node's allocatable) or request, divided by the divisor and rounded up, as the kubelet
    does.

    >>> resource_field_ref({"resources": {"limits": {"cpu": "500m"}}},
    ...     {"resource": "limits.cpu"}, {"cpu": "16"})
    '1'
    >>> resource_field_ref({"resources": {"requests": {"memory": "1Gi"}}},
    ...     {"resource": "requests.memory", "divisor": "1Mi"}, {})
    '1024'
    """
    resource = str(ref["resource"])
    kind, _, name = resource.partition(".")
    resources = container.get("resources", {})
    value = resources.get(kind, {}).get(name)
    if value is None and kind == "limits":
        value = allocatable.get(name)
    if value is None:
        value = "0"
    divisor = parse_quantity(ref.get("divisor", "1") or "1")
    if divisor == 0:
        raise SpecError(f"resourceFieldRef {resource}: divisor must not be 0")
    quotient = Decimal(parse_quantity(value)) / Decimal(divisor)
    return str(math.ceil(quotient))


def _data_of(
    kind: str, lookup: Lookup, namespace: str, name: str, optional: bool
) -> Mapping[str, str]:
    data = lookup(namespace, name)
    if data is None:
        if optional:
            return {}
        raise SpecError(f"{kind} {namespace}/{name} not found")
    return data


def resolve_env(
    pod: Pod,
    container: Mapping[str, Any],
    *,
    secrets: Lookup,
    configmaps: Lookup,
    allocatable: Mapping[str, str],
    base: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment: ``base`` (image and service variables), then
    ``envFrom`` in order, then ``env`` in order (later entries win, ``$(VAR)`` refers to
    earlier ones), as the kubelet builds it."""
    namespace = str(pod["metadata"]["namespace"])
    env = dict(base)
    for source in container.get("envFrom", []) or []:
        prefix = str(source.get("prefix", ""))
        if "configMapRef" in source:
            ref = source["configMapRef"]
            data = _data_of(
                "ConfigMap", configmaps, namespace, ref["name"], ref.get("optional", False)
            )
        elif "secretRef" in source:
            ref = source["secretRef"]
            data = _data_of("Secret", secrets, namespace, ref["name"], ref.get("optional", False))
        else:
            raise SpecError(f"envFrom entry {source} has neither configMapRef nor secretRef")
        env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env", []) or []:
        name = str(var["name"])
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        source = var.get("valueFrom")
        if not source:
            env[name] = ""
        elif "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = resource_field_ref(container, source["resourceFieldRef"], allocatable)
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            is_secret = "secretKeyRef" in source
            ref = source["secretKeyRef" if is_secret else "configMapKeyRef"]
            kind = "Secret" if is_secret else "ConfigMap"
            optional = bool(ref.get("optional", False))
            data = _data_of(
                kind, secrets if is_secret else configmaps, namespace, ref["name"], optional
            )
            if ref["key"] in data:
                env[name] = data[ref["key"]]
            elif not optional:
                raise SpecError(f"{kind} {namespace}/{ref['name']} has no key {ref['key']!r}")
        else:
            raise SpecError(f"env {name}: valueFrom {sorted(source)} is not supported")
    return env


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


def resolve_port(container: Mapping[str, Any], port: int | str) -> int:
    """A probe's or hook's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []) or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    names = [p.get("name") for p in container.get("ports", []) or []]
    raise SpecError(f"port {port!r} is not a port of container {container['name']}; names: {names}")


@dataclass(frozen=True)
class Probe:
    """One probe of a container, with the kubelet's defaults."""

    kind: str
    """http, tcp, exec or grpc."""
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    host: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def parse_probe(container: Mapping[str, Any], spec: Mapping[str, Any] | None) -> Probe | None:
    """A container's ``startupProbe``/``readinessProbe``/``livenessProbe``, or None.

    >>> parse_probe({"name": "c", "ports": [{"name": "http", "containerPort": 8000}]},
    ...     {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5})
    ... # doctest: +ELLIPSIS
    Probe(kind='http', port=8000, path='/health', scheme='HTTP', host='', headers=(), ...)
    """
    if not spec:
        return None

    def probe(kind: str, **handler: Any) -> Probe:
        return Probe(
            kind=kind,
            initial_delay_s=float(spec.get("initialDelaySeconds", 0)),
            period_s=float(spec.get("periodSeconds", 10)),
            timeout_s=float(spec.get("timeoutSeconds", 1)),
            success_threshold=int(spec.get("successThreshold", 1)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
            **handler,
        )

    if "httpGet" in spec:
        h = spec["httpGet"]
        return probe(
            "http",
            port=resolve_port(container, h["port"]),
            path=str(h.get("path", "/")),
            scheme=str(h.get("scheme", "HTTP")),
            host=str(h.get("host", "")),
            headers=tuple((x["name"], x["value"]) for x in h.get("httpHeaders", []) or []),
        )
    if "tcpSocket" in spec:
        t = spec["tcpSocket"]
        return probe("tcp", port=resolve_port(container, t["port"]), host=str(t.get("host", "")))
    if "exec" in spec:
        return probe("exec", command=tuple(spec["exec"].get("command", [])))
    if "grpc" in spec:
        return probe("grpc", port=int(spec["grpc"]["port"]))
    raise SpecError(f"probe of container {container['name']} has no handler: {sorted(spec)}")


LOOPBACK_WORDS = ("0.0.0.0", "127.0.0.1")


def localize(text: str, pod_ip: str) -> str:
    """Inside a pod, "all addresses" and "this host" mean the pod's own address; here the
    pod's address is its loopback pod IP, so commands are rewritten to it.

    >>> localize("--liveness=http://0.0.0.0:8081/healthz", "127.0.3.4")
    '--liveness=http://127.0.3.4:8081/healthz'
    >>> localize("http://localhost:8000/metrics", "127.0.3.4")
    'http://127.0.3.4:8000/metrics'
    """
    for word in LOOPBACK_WORDS:
        text = text.replace(word, pod_ip)
    text = text.replace("//localhost:", f"//{pod_ip}:")
    return pod_ip if text == "localhost" else text
