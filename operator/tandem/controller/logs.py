"""Log records that carry the Kubernetes object they are about. No I/O.

Kopf's formatters read ``k8s_ref`` from a record: the text format prefixes the message
with ``[namespace/name]`` and the JSON format (``--log-format json``) adds an ``object``
field, so every line about an InferenceService can be found by its name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any


def object_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }


def object_logger(logger: logging.Logger, obj: Mapping[str, Any]) -> logging.LoggerAdapter[Any]:
    """``logger`` whose records are about ``obj`` (never posted as Events by Kopf)."""
    return logging.LoggerAdapter(logger, {"k8s_ref": object_ref(obj), "k8s_skip": True})
