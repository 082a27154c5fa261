"""Operator-level restrictions on what an InferenceService may ask for. Pure.

Whoever may create an InferenceService in a namespace chooses its engine and router
images, a Secret whose keys become the engines' environment, and a Prometheus URL the
operator sends queries to. The cluster's operator (not the spec's author) bounds those
choices here; the chart sets them from its ``policy`` values and ships the same rules as
a ValidatingAdmissionPolicy, so the API server refuses a violating spec up front and the
operator, as the second line, reports one that got in (``Ready=False``,
``PolicyViolation``) and builds and queries nothing for it.

One refusal no setting lifts: a ``file://`` model. It names a folder on the machine
``tandem up`` runs on, which no pod has; the message says how a volume provides the
folder instead (``pvc://``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from tandem.api import InferenceService
from tandem.api.rules import Problem

SecretPolicy = Literal["any", "prefixed", "none"]


@dataclass(frozen=True)
class Restrictions:
    """What the operator allows every InferenceService it serves (defaults: anything)."""

    image_prefixes: tuple[str, ...] = ()
    """Allowed image references start with one of these (``docker.io/vllm/``); empty
    allows every image."""
    secrets: SecretPolicy = "any"
    """``model.secretRef``: any Secret of the namespace, only those whose name starts
    with :attr:`secret_prefix` (a label cannot be checked without reading Secrets, which
    the operator may not), or none."""
    secret_prefix: str = "tandem-model-"
    prometheus_urls: tuple[str, ...] | None = None
    """Base URLs ``spec.autoscaling.metrics.url`` may point at (scheme, host, port if
    given, path prefix); None allows every URL, empty allows none."""


def check_restrictions(isvc: InferenceService, rules: Restrictions) -> list[Problem]:
    """Every way ``isvc`` asks for more than ``rules`` allow, with the field and what
    would be allowed.

    >>> from tandem.api.validate import load_inference_service
    >>> isvc = load_inference_service({"metadata": {"name": "a"}, "spec": {
    ...     "model": {"name": "m", "uri": "hf://o/n"}, "engine": {"image": "evil/x:1"}}})
    >>> [p.path for p in check_restrictions(isvc, Restrictions(image_prefixes=("vllm/",)))]
    ['spec.engine.image']
    """
    spec = isvc.spec
    problems: list[Problem] = []
    if spec.model.uri.startswith("file://"):
        problems.append(Problem("spec.model.uri", local_model_message(spec.model.uri)))
    allowed = ", ".join(rules.image_prefixes) or "(none)"
    for path, image in (
        ("spec.engine.image", spec.engine.image),
        ("spec.router.image", spec.router.image),
    ):
        if (
            image is not None
            and rules.image_prefixes
            and not image.startswith(rules.image_prefixes)
        ):
            problems.append(
                Problem(path, f"image {image!r} is not from an allowed repository: {allowed}")
            )
    secret = spec.model.secret_ref
    if secret is not None:
        if rules.secrets == "none":
            problems.append(
                Problem("spec.model.secretRef", "this operator allows no model Secret; remove it")
            )
        elif rules.secrets == "prefixed" and not secret.name.startswith(rules.secret_prefix):
            problems.append(
                Problem(
                    "spec.model.secretRef.name",
                    f"{secret.name!r}: this operator only hands engines Secrets named "
                    f"{rules.secret_prefix}*",
                )
            )
    url = spec.autoscaling.metrics.url
    if (
        url is not None
        and rules.prometheus_urls is not None
        and not is_allowed_url(url, rules.prometheus_urls)
    ):
        allowed_urls = ", ".join(rules.prometheus_urls) or "(none: use source pods)"
        problems.append(
            Problem(
                "spec.autoscaling.metrics.url",
                f"{url!r} is not an allowed Prometheus; allowed: {allowed_urls}",
            )
        )
    return problems


def local_model_message(uri: str) -> str:
    """Why a cluster cannot serve a ``file://`` model, and what to write instead.

    >>> "pvc://CLAIM/PATH" in local_model_message("file:///srv/m")
    True
    """
    return (
        f"{uri!r} is a folder on one machine: only `tandem up` serves file:// models. "
        "In a cluster a volume provides the folder: put it on a PersistentVolume (NFS, "
        "a cloud disk, or hostPath/local where the folder is on the nodes), bind a "
        "PersistentVolumeClaim to it and set model.uri to pvc://CLAIM/PATH (mounted "
        "read-only at /models/CLAIM/PATH); or use hf://org/name or s3://bucket/path"
    )


def is_allowed_url(url: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``url`` is under one of ``allowed``: same scheme and host, the same port
    when the entry names one, and a path under the entry's; no user info.

    >>> is_allowed_url("http://prom.mon:9090/api", ("http://prom.mon:9090",))
    True
    >>> is_allowed_url("http://prom.mon:9090@evil.example/", ("http://prom.mon:9090",))
    False
    >>> is_allowed_url("http://127.0.0.1:4321", ("http://127.0.0.1",))
    True
    """
    try:
        got = urlsplit(url)
        got_port = got.port
    except ValueError:
        return False
    if got.username is not None or got.password is not None:
        return False
    for entry in allowed:
        want = urlsplit(entry)
        path = want.path.rstrip("/")
        if (
            got.scheme == want.scheme
            and got.hostname == want.hostname
            and (want.port is None or got_port == want.port)
            and (got.path.rstrip("/") == path or got.path.startswith(path + "/"))
        ):
            return True
    return False
