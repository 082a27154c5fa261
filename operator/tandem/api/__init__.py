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


class ObjectMeta(Model):
    """The parts of ``metadata`` Tandem reads; everything else is kept but not modelled."""

    model_config = Model.model_config | {"extra": "allow"}

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=42)
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
