"""The ``InferenceService`` API (``serving.tandem.dev/v1alpha1``): models, rules, CRD. Pure.

``InferenceService`` is the whole resource; :mod:`tandem.api.validate` turns a manifest
into one (or into every problem, with field paths); :mod:`tandem.api.crd` generates the
CRD from these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tandem.api.base import Model
from tandem.api.spec import InferenceServiceSpec, PoolSpec
from tandem.api.status import InferenceServiceStatus

GROUP = "serving.tandem.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
SHORT_NAMES = ("tisvc",)
#: The name becomes the router's Service name, a DNS-1035 label: a letter first.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: Room for the longest child name, ``<name>-prefill`` (and its pods' suffixes) in 63.
NAME_MAX_LENGTH = 42


class ObjectMeta(Model):
    """The parts of ``metadata`` Tandem reads; everything else is kept but not modelled."""

    model_config = Model.model_config | {"extra": "allow"}

    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX_LENGTH)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class InferenceService(Model):
    """An LLM service: a prefill pool, a decode pool (or one aggregated pool) and a router."""

    api_version: Literal["serving.tandem.dev/v1alpha1"] = Field(
        default="serving.tandem.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["InferenceService"] = "InferenceService"
    metadata: ObjectMeta
    spec: InferenceServiceSpec
    status: InferenceServiceStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    def to_manifest(self) -> dict[str, Any]:
        """The resource as a Kubernetes manifest (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "NAME_MAX_LENGTH",
    "NAME_PATTERN",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "ObjectMeta",
    "PoolSpec",
]
