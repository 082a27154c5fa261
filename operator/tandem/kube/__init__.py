"""The only code that talks to the Kubernetes API. Does I/O (except the pure helpers).

``KubeClient`` (:mod:`tandem.kube.client`) carries credentials and connections; the
functions are named by their I/O: ``fetch_*`` read, ``apply_*``/``patch_*``/``post_*``/
``create_*``/``replace_*`` write, ``delete_*`` delete. :mod:`tandem.kube.semantic`
(client-side apply) and :mod:`tandem.kube.resources` (types and paths) are pure.
"""

from tandem.kube.client import Connection, KubeClient, KubeError, RequestObserver
from tandem.kube.events import build_event, post_event
from tandem.kube.lease import create_lease, fetch_lease, replace_lease
from tandem.kube.objects import (
    Applied,
    NotOurs,
    apply_object,
    delete_object,
    fetch_object,
    fetch_objects,
    patch_annotations,
)
from tandem.kube.resources import (
    CHILD_TYPES,
    DEPLOYMENT,
    INFERENCE_SERVICE,
    POD,
    ResourceType,
    resource_for,
)
from tandem.kube.scale import fetch_scale, patch_scale
from tandem.kube.semantic import LAST_APPLIED_ANNOTATION, compute_apply_patch
from tandem.kube.status import patch_status

__all__ = [
    "CHILD_TYPES",
    "DEPLOYMENT",
    "INFERENCE_SERVICE",
    "LAST_APPLIED_ANNOTATION",
    "POD",
    "Applied",
    "Connection",
    "KubeClient",
    "KubeError",
    "NotOurs",
    "RequestObserver",
    "ResourceType",
    "apply_object",
    "build_event",
    "compute_apply_patch",
    "create_lease",
    "delete_object",
    "fetch_lease",
    "fetch_object",
    "fetch_objects",
    "fetch_scale",
    "patch_annotations",
    "patch_scale",
    "patch_status",
    "post_event",
    "replace_lease",
    "resource_for",
]
